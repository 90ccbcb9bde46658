/**
 * Searching the market at a bid: each offer carries its machine's bid floor (`offers.bid_floor`, a copy of
 * `provider_prices.bid_floor`; null: the machine takes no bids), so that `GET /offers?max_bid=` filters on the offer
 * row itself and `sort=bid_floor` walks an index of the machines that take bids and stops after a page, as the other
 * sorts do, where a lookup of each walked offer's machine rates would read the whole market to find the few that take
 * bids.
 *
 * The database keeps the copy, whoever writes (an instance of the release before this one too, during a rolling
 * update): a trigger on the machine's rates copies a changed floor onto its offers (`provider_prices_offer_bid_floor`),
 * and one on `offers` gives a new offer its machine's floor (`offers_bid_floor`). The rates trigger takes the machine's
 * row first (`FOR SHARE`), as a writer of its offers holds it: offers being written meanwhile are copied to once they
 * commit, and one written after reads the new floor. definitions.ts holds their current text. The migration takes the
 * rates table first, so that no rates change is half-way (written, its copy not) across the backfill. Frozen:
 * Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`LOCK TABLE provider_prices IN SHARE MODE`.execute(db);
  await sql`ALTER TABLE offers ADD COLUMN bid_floor numeric`.execute(db);
  await sql`
    UPDATE offers o SET bid_floor = pp.bid_floor
    FROM provider_prices pp WHERE pp.provider_id = o.provider_id AND pp.bid_floor IS NOT NULL`.execute(db);
  await sql`
    CREATE INDEX offers_bid_floor_idx ON offers (bid_floor, provider_id, model_key) WHERE bid_floor IS NOT NULL`.execute(
    db,
  );
  await sql`
    CREATE FUNCTION provider_prices_offer_bid_floor() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.bid_floor IS NOT DISTINCT FROM NEW.bid_floor THEN
    RETURN NULL;
  END IF;
  PERFORM 1 FROM providers WHERE id = NEW.provider_id FOR SHARE;
  PERFORM 1 FROM offers WHERE provider_id = NEW.provider_id ORDER BY model_key FOR UPDATE;
  UPDATE offers SET bid_floor = NEW.bid_floor
  WHERE provider_id = NEW.provider_id AND bid_floor IS DISTINCT FROM NEW.bid_floor;
  RETURN NULL;
END
$fn$`.execute(db);
  await sql`
    CREATE TRIGGER provider_prices_offer_bid_floor AFTER INSERT OR UPDATE OF bid_floor ON provider_prices
    FOR EACH ROW EXECUTE FUNCTION provider_prices_offer_bid_floor()`.execute(db);
  await sql`
    CREATE FUNCTION offers_bid_floor() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.bid_floor := (SELECT pp.bid_floor FROM provider_prices pp WHERE pp.provider_id = NEW.provider_id);
  RETURN NEW;
END
$fn$`.execute(db);
  await sql`
    CREATE TRIGGER offers_bid_floor BEFORE INSERT ON offers FOR EACH ROW EXECUTE FUNCTION offers_bid_floor()`.execute(
    db,
  );
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER offers_bid_floor ON offers`.execute(db);
  await sql`DROP FUNCTION offers_bid_floor()`.execute(db);
  await sql`DROP TRIGGER provider_prices_offer_bid_floor ON provider_prices`.execute(db);
  await sql`DROP FUNCTION provider_prices_offer_bid_floor()`.execute(db);
  await sql`DROP INDEX offers_bid_floor_idx`.execute(db);
  await sql`ALTER TABLE offers DROP COLUMN bid_floor`.execute(db);
}
