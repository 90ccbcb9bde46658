/**
 * An index for the market's sort by price per GB of VRAM (`sort=vram_price`): the offer's price per GPU-hour over
 * its smallest VRAM in GB, to 9 decimals, as the search orders by it (`db/offer-repository.ts`, the same expression,
 * so the planner walks this index), on the rows with free GPUs like the other sorts' indexes: a search walks the
 * market in that order and stops after a page. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE INDEX offers_vram_price_idx
    ON offers ((round(price_per_gpu_hour * 1024 / greatest(vram_mb, 1), 9)), provider_id, model_key)
    WHERE free_gpus > 0`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX offers_vram_price_idx`.execute(db);
}
