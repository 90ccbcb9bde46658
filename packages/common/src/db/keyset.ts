/**
 * The SQL side of keyset paging on a timestamp column and `id` (`paging.ts`'s `KeysetPosition`): the position a row
 * stands at, and the rows after a position in either order.
 */
import { sql } from 'kysely';
import type { KeysetPosition } from '../paging.ts';

/** The column's value as a position keeps it: exact to the microsecond, UTC (select it `AS cursor_at`). */
export const cursorAt = (column: string) =>
  sql<string>`to_char(${sql.ref(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Rows strictly after `p` in newest-first order of (column, id). */
export const olderThan = (column: string, p: KeysetPosition) =>
  sql<boolean>`(${sql.ref(column)}, id) < (${p.at}::timestamptz, ${p.id}::uuid)`;

/** Rows strictly after `p` in oldest-first order of (column, id). */
export const newerThan = (column: string, p: KeysetPosition) =>
  sql<boolean>`(${sql.ref(column)}, id) > (${p.at}::timestamptz, ${p.id}::uuid)`;
