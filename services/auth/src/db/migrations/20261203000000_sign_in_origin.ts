/**
 * Where each refresh token was issued: the caller's address and `User-Agent` (at most 200 characters), so a user's
 * list of signed-in devices (`GET /api/v1/auth/sign-ins`) says which is which. Null for tokens issued before.
 * Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE refresh_tokens ADD COLUMN user_agent text, ADD COLUMN ip text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE refresh_tokens DROP COLUMN user_agent, DROP COLUMN ip`.execute(db);
}
