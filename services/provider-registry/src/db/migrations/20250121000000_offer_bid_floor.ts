/**
 * Searching the market at a bid: each offer carries its machine's bid floor (`offers.bid_floor`, a copy of
 * `provider_prices.bid_floor`; null: the machine takes no bids), so that `GET /offers?max_bid=` filters on the offer
 * row itself and `sort=bid_floor` walks an index of its own (the machines that take bids, with free GPUs) and stops
 * after a page, as the other sorts do, where a lookup of each walked offer's machine rates would read the whole market
 * to find the few that take bids.
 *
 * The copy is kept where the price is: `offers_refresh_gpus` (definitions.ts: every change of a machine's GPUs) and the
 * repricing of a machine whose rates changed (offer-repository.ts `repriceProvider`), each reading the machine's rates
 * as the price does. Here: the column, the copy of the floors held now, and the index. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE offers ADD COLUMN bid_floor numeric`.execute(db);
  await sql`
    UPDATE offers o SET bid_floor = pp.bid_floor
    FROM provider_prices pp WHERE pp.provider_id = o.provider_id AND pp.bid_floor IS NOT NULL`.execute(db);
  await sql`
    CREATE INDEX offers_bid_floor_idx ON offers (bid_floor, provider_id, model_key)
    WHERE free_gpus > 0 AND bid_floor IS NOT NULL`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX offers_bid_floor_idx`.execute(db);
  await sql`ALTER TABLE offers DROP COLUMN bid_floor`.execute(db);
}
