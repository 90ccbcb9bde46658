/**
 * Listing rules: which entries a listing holds, in which order, where a page
 * ends and where the next one starts.
 *
 * - Entries come in the store's order, the bytes of each key's UTF-8, so that
 *   the last entry of a page is where the next one starts.
 * - A one-level listing returns each common prefix ("folder") as one entry. A
 *   page may end on a folder (`data/`), and a start position may lie inside
 *   one (`data/one.csv`): the next page then starts after the whole folder,
 *   which was already listed as one entry, so no folder comes back twice.
 * - With `metadata`, each listed object's content type is fetched: S3's
 *   ListObjectsV2 does not return it, so one HEAD per object of the page (not
 *   per folder, not per key passed over), 16 at a time. An object deleted
 *   between the listing and its HEAD keeps its entry, with no content type.
 * - A page's position is its last entry's key, a folder's included; as a
 *   cursor it is that key in the platform's cursor codec.
 */
import { decodeCursor, encodeCursor } from '@gpu/common';
import type { ObjectEntry, ObjectStore } from './store.ts';

export interface ListRequest {
  bucket: string;
  prefix: string;
  recursive: boolean;
  /** At most this many entries (the page size). */
  limit: number;
  /** List the entries after this key (a page's position). */
  startAfter?: string;
  /** Fetch each object's content type. */
  metadata?: boolean;
}

export interface Listing {
  entries: ObjectEntry[];
  /** The key after which the next page starts; undefined on the last page. */
  next?: string;
}

/** Most keys the store returns per page. */
const STORE_PAGE = 1000;

/** HEAD requests in flight while fetching content types. */
const HEAD_CONCURRENCY = 16;

/**
 * U+10FFFF, the largest code point, whose UTF-8 (F4 8F BF BF) sorts after every other character's: a folder name
 * followed by it sorts after the folder's keys (all but ones continuing with that very character, which the listing
 * still leaves out below).
 */
const PAST_EVERY_KEY = '\u{10FFFF}';

/**
 * In a one-level listing, the folder (common prefix) that `startAfter` lies in, or is, when there is one: `data/`
 * for `data/` or `data/one.csv` under prefix `''`. The folder was one entry of an earlier page, so every key in it
 * sorts, as an entry, at or before `startAfter`: the next page starts after the whole folder. (Passing `data/` to
 * the store as StartAfter unchanged would bring the folder back for ever: `data/one.csv` sorts after it.)
 */
function folderOf(prefix: string, startAfter: string | undefined): string | undefined {
  if (startAfter === undefined || !startAfter.startsWith(prefix)) return undefined;
  const slash = startAfter.indexOf('/', prefix.length);
  return slash === -1 ? undefined : startAfter.slice(0, slash + 1);
}

/** A listing page: the store's pages gathered until `limit` entries (or the end), in the store's order. */
export async function listObjects(store: ObjectStore, req: ListRequest): Promise<Listing> {
  const entries: ObjectEntry[] = [];
  const { limit } = req;
  const folder = req.recursive ? undefined : folderOf(req.prefix, req.startAfter);
  const startAfter = folder === undefined ? req.startAfter : `${folder}${PAST_EVERY_KEY}`;
  const folders = new Set<string>();
  let token: string | undefined;
  do {
    const page = await store.listPage({
      bucket: req.bucket,
      prefix: req.prefix,
      oneLevel: !req.recursive,
      startAfter,
      token,
      maxKeys: Math.min(STORE_PAGE, limit - entries.length),
    });
    for (const prefix of page.folders) {
      // The folder that start_after lies in was listed already (as one entry), whatever keys follow in it; and
      // a store that repeats a folder on a later page of its own (s3rver) does not list it twice.
      if (prefix !== folder && !folders.has(prefix)) {
        folders.add(prefix);
        entries.push({ key: prefix, size: 0, isPrefix: true });
      }
    }
    for (const object of page.objects) entries.push(object);
    token = page.nextToken;
  } while (token && entries.length < limit);
  // Each key is encoded once, not once per comparison (a listing may hold 100,000 entries).
  const sorted = entries
    .map((entry) => ({ entry, bytes: Buffer.from(entry.key) }))
    .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    .map(({ entry }) => entry);
  const truncated = token !== undefined || sorted.length > limit;
  const shown = sorted.slice(0, limit);
  if (req.metadata) await withContentTypes(store, req.bucket, shown);
  return { entries: shown, next: truncated && shown.length > 0 ? shown[shown.length - 1]!.key : undefined };
}

/** Fills in each object's content type (folders have none). */
async function withContentTypes(store: ObjectStore, bucket: string, entries: ObjectEntry[]): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < entries.length) {
      const entry = entries[next++]!;
      if (entry.isPrefix) continue;
      try {
        entry.contentType = (await store.head(bucket, entry.key, {})).contentType;
      } catch (err) {
        // Deleted since the store listed it: the listing still shows what the store listed.
        if ((err as { code?: string }).code !== 'OBJECT_NOT_FOUND') throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(HEAD_CONCURRENCY, entries.length) }, worker));
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
