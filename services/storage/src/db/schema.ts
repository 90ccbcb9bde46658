/** Kysely table types of the storage service's database: the object catalog and its reconciliation (`domain/catalog/`). */
import type { ColumnType, Generated } from 'kysely';

/** One object the store holds, as last written through the service or found by reconciliation. */
interface ObjectsTable {
  bucket: string;
  /** Sorted by its UTF-8 bytes (`COLLATE "C"`), the store's listing order. */
  key: string;
  size: ColumnType<number, number, number>;
  content_type: string | null;
  etag: string | null;
  /** The user billed for it: the bucket's owner, or `{id}` of `users/{id}/` in the default bucket; null: nobody. */
  owner_id: string | null;
  /** The store's Last-Modified. */
  last_modified: Date | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

/** The buckets the catalog knows, and when each was last found complete against the store. */
interface CatalogBucketsTable {
  name: string;
  reconciled_at: Date | null;
}

/** Which instance reconciles each period (the first to insert the period's row). */
interface ReconcileRunsTable {
  period_start: Date;
  instance_id: string;
  started_at: Generated<Date>;
}

/** Where the reconciliation's sweep over the buckets has come (one row): the bucket, and the last key compared. */
interface CatalogSweepTable {
  id: Generated<number>;
  bucket: string;
  /** Null: the bucket's start. */
  after_key: string | null;
}

/** A key the service handed out a write URL for (a presigned PUT, a write grant), until the URL expires. */
interface CatalogExpectedWritesTable {
  bucket: string;
  key: string;
  until: Date;
  /** A write URL's note (one per key) or a copy's (one per copy). */
  kind: ColumnType<'url' | 'copy', 'url' | 'copy' | undefined, never>;
  /** The user a write URL was handed to (null: a copy's, a platform service's or an admin's). */
  owner: string | null;
}

export interface StorageDB {
  objects: ObjectsTable;
  catalog_buckets: CatalogBucketsTable;
  reconcile_runs: ReconcileRunsTable;
  catalog_sweep: CatalogSweepTable;
  catalog_expected_writes: CatalogExpectedWritesTable;
}
