/** The SQL of the lists: keyset paging, newest first, on a timestamp column and `id` (domain/keyset.ts), and who may see a row. */
import { sql } from 'kysely';

/**
 * The keyset conditions are common's (`cursorAt`: the position of a row; `olderThan`, `newerThan`: rows after a
 * position, newest or oldest first).
 */
export { cursorAt, newerThan, olderThan } from '@gpu/common';

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
