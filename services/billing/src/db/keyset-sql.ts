/** The SQL of keyset paging, newest first, on a timestamp column and `id` (domain/keyset.ts). */
import { sql } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';

/** The column's value as the cursor keeps it: exact to the microsecond, UTC. */
export const cursorAt = (column: string) =>
  sql<string>`to_char(${sql.ref(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Rows strictly after `p` in newest-first order of (column, id). */
export const olderThan = (column: string, p: KeysetPosition) =>
  sql<boolean>`(${sql.ref(column)}, id) < (${p.at}::timestamptz, ${p.id}::uuid)`;
