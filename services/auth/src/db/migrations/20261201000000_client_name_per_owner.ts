/**
 * Client names are unique per owner, no longer across every tenant: two providers may each name a daemon `daemon-1`
 * (a 409 CLIENT_NAME_TAKEN had told one provider another's daemon names). A daemon's name is unique among its
 * owner's active clients; a platform client's (`service`, `gateway`, `scheduler`, no owner) among the platform's
 * active clients, which start-up finds by name (`clients.bootstrap`). Tokens name a client by its ID, never its
 * name. Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX clients_active_name_key`.execute(db);
  await sql`
    CREATE UNIQUE INDEX clients_active_owner_name_key ON clients (owner_id, name)
    WHERE revoked_at IS NULL AND owner_id IS NOT NULL`.execute(db);
  await sql`
    CREATE UNIQUE INDEX clients_active_platform_name_key ON clients (name)
    WHERE revoked_at IS NULL AND owner_id IS NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX clients_active_platform_name_key`.execute(db);
  await sql`DROP INDEX clients_active_owner_name_key`.execute(db);
  await sql`CREATE UNIQUE INDEX clients_active_name_key ON clients (name) WHERE revoked_at IS NULL`.execute(db);
}
