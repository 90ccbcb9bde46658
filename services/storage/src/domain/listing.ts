/**
 * Listing rules: which entries a listing holds, in which order, where a page
 * ends and where the next one starts.
 *
 * - Entries come from the object catalog (`catalog/`), in the order of the
 *   bytes of each key's UTF-8 (the store's order too), so that the last entry
 *   of a page is where the next one starts. A bucket the catalog never
 *   reconciled is reconciled first; the records bucket lists nothing.
 * - A one-level listing returns each common prefix ("folder") as one entry. A
 *   page may end on a folder (`data/`), and a start position may lie inside
 *   one (`data/one.csv`): the next page then starts after the whole folder,
 *   which was already listed as one entry, so no folder comes back twice.
 * - With `metadata`, each object's content type comes from its catalog row (the
 *   store's ListObjectsV2 lacks it): no store request per object.
 * - A page's position is its last entry's key, a folder's included; as a
 *   cursor it is that key in the platform's cursor codec.
 */
import { decodeCursor, encodeCursor } from '@gpu/common';
import type { ObjectCatalog, Reconciler } from './catalog/index.ts';
import type { ObjectEntry } from './store.ts';

export interface ListRequest {
  bucket: string;
  prefix: string;
  recursive: boolean;
  /** At most this many entries (the page size). */
  limit: number;
  /** List the entries after this key (a page's position). */
  startAfter?: string;
  /** Give each object's content type. */
  metadata?: boolean;
}

export interface Listing {
  entries: ObjectEntry[];
  /** The key after which the next page starts; undefined on the last page. */
  next?: string;
}

/** Where a listing reads: the catalog, and reconciliation for a bucket it has not seen yet. */
export interface ListingSource {
  catalog: ObjectCatalog;
  reconciler: Reconciler;
}

/**
 * In a one-level listing, the folder (common prefix) that `startAfter` lies in, or is, when there is one: `data/`
 * for `data/` or `data/one.csv` under prefix `''`. The folder was one entry of an earlier page, so every key in it
 * sorts, as an entry, at or before `startAfter`: the next page starts after the whole folder.
 */
function folderOf(prefix: string, startAfter: string | undefined): string | undefined {
  if (startAfter === undefined || !startAfter.startsWith(prefix)) return undefined;
  const slash = startAfter.indexOf('/', prefix.length);
  return slash === -1 ? undefined : startAfter.slice(0, slash + 1);
}

/**
 * The first key after every key in `folder` (which ends with `/`): the folder with its `/` (0x2F) made `0` (0x30),
 * the next byte. Exact: no key of the folder sorts at or after it, every other key after the folder does.
 */
const pastFolder = (folder: string) => `${folder.slice(0, -1)}0`;

/** A listing page: `limit` entries (or the rest) from the catalog, and where the next page starts. */
export async function listObjects(source: ListingSource, req: ListRequest): Promise<Listing> {
  if (!(await source.reconciler.ensureCatalogued(req.bucket))) return { entries: [] };
  // One entry more than the page, to know whether another page follows.
  const wanted = req.limit + 1;
  const entries: ObjectEntry[] = [];
  const folder = req.recursive ? undefined : folderOf(req.prefix, req.startAfter);
  let after = folder === undefined ? req.startAfter : pastFolder(folder);
  let inclusive = folder !== undefined;
  for (;;) {
    const need = wanted - entries.length;
    const rows = await source.catalog.page({ bucket: req.bucket, prefix: req.prefix, after, inclusive, limit: need });
    let skipped = false;
    for (const row of rows) {
      const slash = req.recursive ? -1 : row.key.indexOf('/', req.prefix.length);
      if (slash === -1) {
        entries.push(row);
        after = row.key;
        inclusive = false;
        continue;
      }
      // A key in a folder: the folder is the entry, and the walk goes on past all of its keys (a query each).
      const sub = row.key.slice(0, slash + 1);
      entries.push({ key: sub, size: 0, isPrefix: true });
      after = pastFolder(sub);
      inclusive = true;
      skipped = true;
      break;
    }
    // Full, or the catalog has no more rows (a page that passed no folder and came back short).
    if (entries.length >= wanted || (!skipped && rows.length < need)) break;
  }
  const shown = entries.slice(0, req.limit);
  if (!req.metadata) for (const entry of shown) entry.contentType = undefined;
  return { entries: shown, next: entries.length > req.limit ? shown[shown.length - 1]?.key : undefined };
}

/** The cursor of a listing position (the key after which the next page starts). */
export function listingCursor(startAfter: string): string {
  return encodeCursor([startAfter]);
}

/** The position of a listing cursor, or undefined when the text is not one this service wrote. */
export function cursorPosition(cursor: string): string | undefined {
  const values = decodeCursor(cursor, 1);
  return typeof values?.[0] === 'string' ? values[0] : undefined;
}
