/**
 * Room on each `gpus` page for a heartbeat's metrics (issue #55): the table's fillfactor is 85, so that a GPU's new
 * metrics (utilization, temperature, power draw, health: no indexed column) land on the row's own page as a heap-only
 * (HOT) update, with no new entry in `gpus_pkey`.
 *
 * Why: rows went in packed (fillfactor 100), so a page had no room for a row's new version: each metrics write put
 * it on another page and a new entry in the key's index. At 1,000,000 providers (4,002,597 GPUs), heartbeats one in
 * ten with one GPU's metrics, replayed straight to PostgreSQL: 7-30 % of the GPU updates were heap-only packed and
 * 86-99 % at 85, the WAL 216 B a heartbeat against 249-255. The table takes about 17 % more room (1,483 MB -> 1,737 MB
 * there).
 *
 * The setting applies to pages written from now on: an existing registry's packed pages take it as they are
 * rewritten (their rows' updates move to new pages, as before; `VACUUM FULL gpus` rewrites them at once, under an
 * exclusive lock). Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE gpus SET (fillfactor = 85)`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE gpus RESET (fillfactor)`.execute(db);
}
