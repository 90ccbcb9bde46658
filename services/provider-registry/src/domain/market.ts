/**
 * The market: searching offers (offers.ts), and keeping them priced and scored. Billing owns prices: its events (or,
 * without NATS, its calls) bring the platform's card and each machine's own rates, the newest of each kept, and the
 * offers they touch are priced again at once; a search never asks billing. The reliability on offers follows the
 * books (reliability.ts) as statuses change and sessions end, and a walk over every machine every
 * `offers.reliability_refresh` rolls the 30-day window on.
 */
import type { Principal, RetryOptions } from '@gpu/common';
import { errors, isPrivileged, type Logger, withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import {
  backfillOffers,
  cardState,
  markRepriced,
  type OfferRow,
  refreshReliabilityPage,
  repricePage,
  repriceProvider,
  searchOffers,
  storePriceCard,
  storeProviderPrices,
} from '../db/offer-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import { type OfferCursor, type OfferFilter, offerGroups } from './offers.ts';

/** Billing's platform card: base rates by model key (with `default`), VRAM and power rates, each model's factors. */
export interface PriceCard {
  baseRates: Record<string, string>;
  vramRate: string;
  powerRate: string;
  /** By model key (and `default`): `{ demand, supply }`, 1 when absent. */
  factors: Record<string, { demand: string; supply: string }>;
}

/** A machine's own rates (absent parts: the platform's). */
export interface ProviderPrices {
  baseRates: Record<string, string>;
  vramRate: string | null;
  powerRate: string | null;
  /** The lowest bid per GPU-hour it takes for an interruptible rental; null or absent: none. */
  bidFloor?: string | null;
}

export interface MarketDeps {
  db: Kysely<RegistryDB>;
  logger: Logger;
  retry?: RetryOptions;
  /** Runs a search someone waits for: the registry holds its heartbeat writes meanwhile (`RegistryService.whileAsked`). */
  whileAsked: <T>(read: () => Promise<T>) => Promise<T>;
}

/** How many machines one statement of a walk (repricing, refreshing) touches. */
const WALK_PAGE = 1000;

/** Only billing (a platform service) and admins tell the registry prices. */
function assertMaySetPrices(actor: Principal): void {
  if (!isPrivileged(actor)) throw errors.forbidden('only platform services set prices', 'ROLE_REQUIRED');
}

export class Market {
  constructor(private readonly deps: MarketDeps) {}

  private retry<T>(fn: () => Promise<T>): Promise<T> {
    return withRetry(fn, this.deps.retry);
  }

  /** A page of offers and the position after it (null on the last page). */
  async search(filter: OfferFilter): Promise<{ items: OfferRow[]; next: OfferCursor | null }> {
    const rows = await this.deps.whileAsked(() => this.retry(() => searchOffers(this.deps.db, filter)));
    const items = rows.slice(0, filter.limit);
    const last = items.at(-1);
    return {
      items,
      next:
        rows.length > filter.limit && last
          ? { sort: filter.sort, value: last.sort_value, providerId: last.provider_id, modelKey: last.model_key }
          : null,
    };
  }

  /**
   * The platform's card as of `occurredAt` (an older one than held changes nothing); whether it was newer. Every offer
   * is priced again in the background (`repricing`), a page of machines at a time, so the caller (billing's call or
   * event) is answered at once, however large the market.
   */
  async setPriceCard(actor: Principal, card: PriceCard, occurredAt: Date): Promise<boolean> {
    assertMaySetPrices(actor);
    const stored = await this.retry(() => storePriceCard(this.deps.db, card, occurredAt));
    if (stored) this.reprice();
    return stored;
  }

  /** The walk repricing the market, while one runs. */
  private repricing?: Promise<void>;
  private again = false;

  /** Starts a walk repricing every offer (one at a time: a card arriving meanwhile walks again after). */
  reprice(): void {
    if (this.repricing) {
      this.again = true;
      return;
    }
    this.repricing = this.repriceAll()
      .catch((err) => this.deps.logger.warn({ err: (err as Error).message }, 'repricing the market failed'))
      .finally(() => {
        this.repricing = undefined;
        if (this.again) {
          this.again = false;
          this.reprice();
        }
      });
  }

  /** Resolves once no repricing walk runs (tests; shutdown). */
  async settled(): Promise<void> {
    while (this.repricing) await this.repricing;
  }

  private async repriceAll(): Promise<void> {
    const card = await this.retry(() => cardState(this.deps.db));
    if (!card) return;
    let after: string | null = null;
    do {
      const from: string | null = after;
      after = await this.retry(() => repricePage(this.deps.db, from, WALK_PAGE));
    } while (after !== null);
    await this.retry(() => markRepriced(this.deps.db, card.occurredAt));
    this.deps.logger.info({ occurred_at: card.occurredAt.toISOString() }, 'price card applied to offers');
  }

  /** At start-up: finishes a repricing walk an instance left unfinished (it stopped, or crashed, midway). */
  async resumeRepricing(): Promise<void> {
    const card = await this.retry(() => cardState(this.deps.db));
    if (card && !card.repriced) this.reprice();
  }

  /** A machine's own rates as of `occurredAt`; its offers priced again. Whether they were stored (newer, known). */
  async setProviderPrices(
    actor: Principal,
    providerId: string,
    prices: ProviderPrices,
    occurredAt: Date,
  ): Promise<boolean> {
    assertMaySetPrices(actor);
    return this.retry(() =>
      this.deps.db.transaction().execute(async (trx) => {
        if (!(await storeProviderPrices(trx, providerId, prices, occurredAt))) return false;
        await repriceProvider(trx, providerId);
        return true;
      }),
    );
  }

  /** One walk over every machine with offers, their reliability refreshed. */
  async refreshReliability(): Promise<void> {
    let after: string | null = null;
    do {
      const from: string | null = after;
      after = await this.retry(() => refreshReliabilityPage(this.deps.db, from, WALK_PAGE));
    } while (after !== null);
  }

  /**
   * Puts the machines registered before the market existed on it (their offers from their GPUs), a page at a time;
   * how many. Each instance runs it at start-up; a machine is given its offers once.
   */
  async backfill(): Promise<number> {
    let total = 0;
    for (;;) {
      const done = await this.retry(() => backfillOffers(this.deps.db, WALK_PAGE, offerGroups));
      total += done;
      if (done === 0) return total;
    }
  }
}
