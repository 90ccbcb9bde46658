/**
 * Discovery: the filters, sorts and keyset cursors of `GET /providers`.
 *
 * GPU conditions (`gpu_model`, `min_vram`, `architecture`) apply to single
 * GPUs, and `min_gpus` counts the GPUs of a provider that meet all of them:
 * `gpu_model=a100&min_vram=40000&min_gpus=2` finds providers with at least two
 * A100s of 40 GB or more. Without GPU conditions `min_gpus` counts all GPUs.
 * `healthy_only` keeps providers whose GPUs are all healthy.
 */
import { decodeCursor, encodeCursor, zTimestamp } from '@gpu/common';
import type { ProviderStatus } from './provider.ts';

const SORT_KEYS = ['registered_at', 'last_seen_at', 'vram', 'gpu_count'] as const;
export type SortKey = (typeof SORT_KEYS)[number];
/** `key` ascending or `-key` descending; ties are broken by provider ID in the same direction. */
export const SORTS = SORT_KEYS.flatMap((k) => [k, `-${k}`] as const);
export type Sort = (typeof SORTS)[number];

export interface DiscoveryFilter {
  status?: ProviderStatus;
  gpu_model?: string;
  min_vram?: number;
  architecture?: string;
  healthy_only?: boolean;
  min_gpus?: number;
  /** Only this owner's providers (set by authorization for the provider role). */
  owner_id?: string;
  sort: Sort;
  limit: number;
  cursor?: Cursor;
}

/** Position after the last row of a page: its sort value (exact, as text) and ID. */
export interface Cursor {
  sort: Sort;
  value: string;
  id: string;
}

export function parseSort(sort: Sort): { key: SortKey; descending: boolean } {
  const descending = sort.startsWith('-');
  return { key: (descending ? sort.slice(1) : sort) as SortKey, descending };
}

/** A cursor as opaque URL-safe text (the platform's cursor codec: the position's values, in order). */
export function cursorText(cursor: Cursor): string {
  return encodeCursor([cursor.sort, cursor.value, cursor.id]);
}

/** Sort values of timestamp keys: UTC with microseconds, as the database gives them. */
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
/** A real instant in the platform's range (JavaScript's Date.parse takes February 30; PostgreSQL does not). */
const INSTANT = zTimestamp();
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const NOT_A_CURSOR = 'not a cursor returned by this service';

/** The cursor in `text`, made for `sort`; or why it is not one (the route answers INVALID_CURSOR with it). */
export function cursorOf(text: string, sort: Sort): Cursor | string {
  const values = decodeCursor(text, 3);
  if (!values?.every((v) => typeof v === 'string')) return NOT_A_CURSOR;
  const [cursorSort, value, id] = values as [string, string, string];
  if (cursorSort !== sort) return `the cursor was made for sort=${cursorSort}, not sort=${sort}`;
  if (!UUID.test(id) || value.length > 64) return NOT_A_CURSOR;
  const { key } = parseSort(sort);
  // A value the service could have written: a bigint's digits (at most 18, below 2^63), or a real instant in the
  // platform's range (a year-0, month-13 or February-30 date reached PostgreSQL as a 500).
  const valid =
    key === 'vram' || key === 'gpu_count'
      ? /^\d{1,18}$/.test(value)
      : TIMESTAMP.test(value) && INSTANT.safeParse(value).success;
  if (!valid) return NOT_A_CURSOR;
  return { sort, value, id };
}
