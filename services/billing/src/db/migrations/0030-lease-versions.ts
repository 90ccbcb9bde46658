/**
 * Billing XXX: billing alone says which GPUs are free (domain/leases/held.ts). After each change of a machine's leases
 * it states the machine's held GPUs to the provider registry, numbered by `machine_lease_versions.version`, which
 * grows by one with each statement of the machine (taken last in the change's transaction, so the statements of one
 * machine are numbered in the order they commit). The expiry sweep finds lapsed reservations by their expiry.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const leaseVersionsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      CREATE TABLE machine_lease_versions (
        provider_id uuid PRIMARY KEY,
        version bigint NOT NULL CHECK (version > 0)
      )`.execute(db);
    await sql`CREATE INDEX gpu_leases_reservation_expiry ON gpu_leases (expires_at) WHERE session_id IS NULL`.execute(
      db,
    );
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX gpu_leases_reservation_expiry`.execute(db);
    await sql`DROP TABLE machine_lease_versions`.execute(db);
  },
};
