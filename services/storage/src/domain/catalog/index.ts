/** The object catalog, for callers outside it: the port, the write-through store and reconciliation. */
export { type ObjectCatalog, ObjectOwners } from './catalog.ts';
export { CatalogedStore } from './cataloged-store.ts';
export { Reconciler } from './reconcile.ts';
