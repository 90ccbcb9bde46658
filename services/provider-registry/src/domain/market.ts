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
  type OfferRow,
  refreshReliabilityPage,
  repricePage,
  repriceProvider,
  searchOffers,
  storePriceCard,
  storeProviderPrices,
} from '../db/offer-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import type { OfferCursor, OfferFilter } from './offers.ts';

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
}

export interface MarketDeps {
  db: Kysely<RegistryDB>;
  logger: Logger;
  retry?: RetryOptions;
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
    const rows = await this.retry(() => searchOffers(this.deps.db, filter));
    const items = rows.slice(0, filter.limit);
    const last = items.at(-1);
    return {
      items,
      next:
        rows.length > filter.limit && last
          ? { sort: filter.sort, value: last.sort_value, providerId: last.provider_id, gpuModel: last.gpu_model }
          : null,
    };
  }

  /**
   * The platform's card as of `occurredAt` (an older one than held changes nothing); every offer priced again, a page
   * of machines at a time. Whether it was newer.
   */
  async setPriceCard(actor: Principal, card: PriceCard, occurredAt: Date): Promise<boolean> {
    assertMaySetPrices(actor);
    const stored = await this.retry(() => storePriceCard(this.deps.db, card, occurredAt));
    if (!stored) return false;
    let after: string | null = null;
    let machines = 0;
    do {
      const from: string | null = after;
      after = await this.retry(() => repricePage(this.deps.db, from, WALK_PAGE));
      machines += WALK_PAGE;
    } while (after !== null);
    this.deps.logger.info({ occurred_at: occurredAt.toISOString(), machines }, 'price card applied to offers');
    return true;
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

  /** One walk over every machine with offers, their reliability refreshed; how many machines it walked. */
  async refreshReliability(): Promise<number> {
    let after: string | null = null;
    let pages = 0;
    do {
      const from: string | null = after;
      after = await this.retry(() => refreshReliabilityPage(this.deps.db, from, WALK_PAGE));
      pages++;
    } while (after !== null);
    return pages * WALK_PAGE;
  }
}
