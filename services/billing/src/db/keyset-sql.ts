/** The SQL of the lists: keyset paging, newest first, on a timestamp column and `id` (domain/keyset.ts), and who may see a row. */
import { sql } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';

/** The column's value as the cursor keeps it: exact to the microsecond, UTC. */
export const cursorAt = (column: string) =>
  sql<string>`to_char(${sql.ref(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** Rows strictly after `p` in newest-first order of (column, id). */
export const olderThan = (column: string, p: KeysetPosition) =>
  sql<boolean>`(${sql.ref(column)}, id) < (${p.at}::timestamptz, ${p.id}::uuid)`;

/** Rows the user took part in: as the renter (`user_id`) or the machine's owner (`provider_owner_id`); `provider`: as the owner only. */
export interface Party {
  userId: string;
  side: 'any' | 'provider';
}

/** The condition of `Party` on a table with `user_id` and `provider_owner_id` (sessions, billing records). */
export const partyOf = ({ userId, side }: Party) =>
  side === 'provider'
    ? sql<boolean>`provider_owner_id = ${userId}`
    : sql<boolean>`(user_id = ${userId} OR provider_owner_id = ${userId})`;
