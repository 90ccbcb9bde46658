/**
 * The owner's hold (`domain/provider.ts`, `HELD_STATUS`): `providers.held` is true from an explicit `busy` (PATCH
 * status, a full update or a registration with that status) until an explicit `idle`. While it is true the rental rule
 * keeps the machine `busy` when its sessions end, and a heartbeat that revives it from `offline` or `error` brings it
 * back `busy`; billing starts no rental on it. Existing machines are not held.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // A constant default: no rewrite of the table.
  await sql`ALTER TABLE providers ADD COLUMN held boolean NOT NULL DEFAULT false`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE providers DROP COLUMN held`.execute(db);
}
