/**
 * An account's epoch, against account pre-hijacking: `users.epoch` counts the times the account started afresh for
 * whoever reads its mail (a reset, or an address verified without the account's sign-in), and every credential records
 * the epoch it was made in: each refresh token (a sign-in's), trusted device, API key, and a daemon client's owner's
 * (`clients.owner_epoch`). A credential of an earlier epoch is dead wherever the service looks, so one made by someone
 * who registered another person's address dies when that person proves the address theirs, however the two
 * requests interleave. Existing rows are of epoch 0, as their accounts are. Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  for (const table of ['users', 'refresh_tokens', 'trusted_devices', 'api_keys']) {
    await sql`ALTER TABLE ${sql.table(table)} ADD COLUMN epoch integer NOT NULL DEFAULT 0`.execute(db);
  }
  await sql`ALTER TABLE clients ADD COLUMN owner_epoch integer NOT NULL DEFAULT 0`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['users', 'refresh_tokens', 'trusted_devices', 'api_keys']) {
    await sql`ALTER TABLE ${sql.table(table)} DROP COLUMN epoch`.execute(db);
  }
  await sql`ALTER TABLE clients DROP COLUMN owner_epoch`.execute(db);
}
