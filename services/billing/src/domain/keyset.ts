/**
 * Keyset paging of the billing lists (a wallet's transactions, billing
 * records), newest first. A page ends at a position: the last row's sort time
 * exactly as PostgreSQL printed it (microseconds, UTC) and its ID, so the next
 * page starts strictly after that row and pages never skip or repeat rows
 * while new ones arrive. The cursor is common's envelope (`encodeCursor`) of
 * `[at, id]`; what the lists answer with it is the platform's one paging
 * contract (README "Paging").
 */
import { decodeCursor, encodeCursor } from '@gpu/common';

/** Where a page ended: the sort time of its last row (as PostgreSQL printed it) and the row's ID. */
export interface KeysetPosition {
  at: string;
  id: string;
}

/** The cursor text of a position. */
export function positionCursor(p: KeysetPosition): string {
  return encodeCursor([p.at, p.id]);
}

/** The position of cursor text; undefined when the text is not a cursor these lists wrote. */
export function cursorPosition(text: string): KeysetPosition | undefined {
  const values = decodeCursor(text, 2);
  if (!values) return undefined;
  const [at, id] = values;
  if (typeof at !== 'string' || typeof id !== 'string') return undefined;
  if (!/^[0-9a-f-]{36}$/.test(id) || Number.isNaN(Date.parse(at))) return undefined;
  return { at, id };
}

/** One page of a list and the cursor of the next (null on the last page). */
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/**
 * The page of `limit` items out of `rows`, which holds up to `limit + 1` rows (one more than a page, read to know
 * whether another page follows), each with its `cursor_at`.
 */
export function keysetPage<T extends { id: string; cursor_at: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return {
    items,
    nextCursor: rows.length > limit && last ? positionCursor({ at: last.cursor_at, id: last.id }) : null,
  };
}
