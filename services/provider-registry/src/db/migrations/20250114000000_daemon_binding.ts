/**
 * The daemon a machine is bound to (`domain/access.ts`, "bound daemons"): `providers.daemon_client_id` is the machine
 * client (a daemon of the machine's owner, by its `client_id`) that registered the machine or claimed it since, or
 * that its owner bound it to. A daemon writes (heartbeats, status, updates, deletion) only the machines bound to it or
 * to none. Existing machines are bound to none: the daemon that next attaches to one claims it.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // Nullable without a default: no rewrite of the table.
  await sql`ALTER TABLE providers ADD COLUMN daemon_client_id text`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE providers DROP COLUMN daemon_client_id`.execute(db);
}
