/**
 * The disk a machine gives each workload (`disk_mb`: its daemon's `workloads.disk_mb`, the allowance of a rental's
 * work directory and /tmp together), on the machine's row as its owner or daemon states it (null: not stated), and on
 * its offers, where renters filter on it (`min_disk`) as on Vast. Machines registered before say nothing until their
 * daemon's next start states it. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE providers ADD COLUMN disk_mb integer CHECK (disk_mb >= 0)`.execute(db);
  await sql`ALTER TABLE offers ADD COLUMN disk_mb integer`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE offers DROP COLUMN disk_mb`.execute(db);
  await sql`ALTER TABLE providers DROP COLUMN disk_mb`.execute(db);
}
