/**
 * Interruptible leases at a bid, as the market shows them: a machine's bid floor from billing's rates
 * (`provider_prices.bid_floor`; null: it takes no bids), and the bids of the GPUs interruptible sessions hold, from
 * billing's statements of its leases (`gpu_holds.bids`: GPU index → bid per GPU-hour). Offers then show what an
 * interruptible rental could get now and the bid that wins a GPU. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE provider_prices ADD COLUMN bid_floor numeric CHECK (bid_floor > 0)`.execute(db);
  await sql`ALTER TABLE gpu_holds ADD COLUMN bids jsonb NOT NULL DEFAULT '{}'`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE gpu_holds DROP COLUMN bids`.execute(db);
  await sql`ALTER TABLE provider_prices DROP COLUMN bid_floor`.execute(db);
}
