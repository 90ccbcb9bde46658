/** Queries on mailed tokens (verify an address, reset a password) and the verified mark. Each takes the database or a transaction. */
import type { ExpressionBuilder, Kysely } from 'kysely';
import type { AuthDatabase, EmailTokenPurpose } from './schema.ts';
import type { UserRow } from './user-repository.ts';

/** How long a used or expired token is kept (a late click still reads as used rather than unknown): a day. */
const KEEP_AFTER_MS = 24 * 60 * 60_000;

/** Stores a new token's hash, and drops the user's tokens of the same purpose that ended more than a day ago. */
export async function insertEmailToken(
  db: Kysely<AuthDatabase>,
  token: { user_id: string; purpose: EmailTokenPurpose; token_hash: string; email: string; expires_at: Date },
): Promise<void> {
  await db.insertInto('email_tokens').values(token).execute();
  await db
    .deleteFrom('email_tokens')
    .where('user_id', '=', token.user_id)
    .where('purpose', '=', token.purpose)
    .where('expires_at', '<', new Date(Date.now() - KEEP_AFTER_MS))
    .execute();
}

/** The live token with this hash (not used, not expired), without using it. */
export async function findLiveEmailToken(
  db: Kysely<AuthDatabase>,
  tokenHash: string,
  purpose: EmailTokenPurpose,
  now: Date,
): Promise<{ user_id: string; email: string } | undefined> {
  return db
    .selectFrom('email_tokens')
    .select(['user_id', 'email'])
    .where(live(tokenHash, purpose, now))
    .executeTakeFirst();
}

/**
 * Uses the live token with this hash: one statement, so of two requests with the same token exactly one gets it.
 * Undefined when it is unknown, used or expired.
 */
export async function useEmailToken(
  db: Kysely<AuthDatabase>,
  tokenHash: string,
  purpose: EmailTokenPurpose,
  now: Date,
): Promise<{ user_id: string; email: string } | undefined> {
  return db
    .updateTable('email_tokens')
    .set({ used_at: now })
    .where(live(tokenHash, purpose, now))
    .returning(['user_id', 'email'])
    .executeTakeFirst();
}

/** The token with this hash and purpose, not used and not expired. */
const live =
  (tokenHash: string, purpose: EmailTokenPurpose, now: Date) => (eb: ExpressionBuilder<AuthDatabase, 'email_tokens'>) =>
    eb.and([
      eb('token_hash', '=', tokenHash),
      eb('purpose', '=', purpose),
      eb('used_at', 'is', null),
      eb('expires_at', '>', now),
    ]);

/** Ends every live token of the user for this purpose (the one that was used made the others pointless). */
export async function retireEmailTokens(
  db: Kysely<AuthDatabase>,
  userId: string,
  purpose: EmailTokenPurpose,
  now: Date,
): Promise<void> {
  await db
    .updateTable('email_tokens')
    .set({ used_at: now })
    .where('user_id', '=', userId)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .execute();
}

/** Marks the user's address verified, if it is still `email` (undefined otherwise); again keeps the first time. */
export async function markEmailVerified(
  db: Kysely<AuthDatabase>,
  userId: string,
  email: string,
  now: Date,
): Promise<UserRow | undefined> {
  return db
    .updateTable('users')
    .set((eb) => ({ email_verified_at: eb.fn.coalesce('email_verified_at', eb.val(now)) }))
    .where('id', '=', userId)
    .where('email', '=', email)
    .returningAll()
    .executeTakeFirst();
}
