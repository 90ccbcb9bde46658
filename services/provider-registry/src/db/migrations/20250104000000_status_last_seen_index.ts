/**
 * An index on `(status, last_seen_at, id)` for discovery by status sorted by
 * `last_seen_at` (the scheduler's "freshest idle providers first").
 *
 * Why: that list walked `providers_last_seen_idx` over every status and
 * filtered the rows of other states out, about 40 % of what it visited (the
 * benchmark's cursor page removed ~1,550 rows by filter for 101 kept; ~900 with
 * this index, and a third less time choosing the page). The status index ends
 * the walk at the offline bound too, as an index condition. The other sorts
 * already have status variants (`providers_status_registered_idx`,
 * `providers_status_max_vram_idx`). Heartbeats move `last_seen_at`, so they
 * write one more index entry; `pnpm bench registry` measures that against the
 * same statement sent directly. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`CREATE INDEX providers_status_last_seen_idx ON providers (status, last_seen_at, id)`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX providers_status_last_seen_idx`.execute(db);
}
