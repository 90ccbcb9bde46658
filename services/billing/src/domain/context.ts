/** What the money-moving operations need: the database, the chain, events and settings. */
import type { Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { Chain } from '../adapters/chain.ts';
import type { BillingDB } from '../db/schema.ts';
import type { EventSink } from './events.ts';
import type { MarketFactors, RateCard } from './pricing.ts';

/** Pricing settings (config `pricing`) and the pluggable demand/supply factors. */
export interface PricingSettings {
  card: RateCard;
  platformFeePercent: string;
  market: MarketFactors;
}

/** Rental-session settings (config `billing`), as milliseconds and decimal strings. */
export interface SessionSettings {
  initialPeriodMs: number;
  holdTopUpBelowMs: number;
  minimumBalance: string;
  gracePeriodMs: number;
  billingIntervalMs: number;
}

export interface BillingContext {
  db: Kysely<BillingDB>;
  /** Null when the blockchain section is not configured: chain operations answer 503. */
  chain: Chain | null;
  events: EventSink;
  logger: Logger;
  /** The token's decimals: the scale of every amount. */
  scale: number;
  /** Commitment at which a sent transfer counts as confirmed. */
  commitment: 'processed' | 'confirmed' | 'finalized';
  minimumPayout: string;
  pricing: PricingSettings;
  sessions: SessionSettings;
  /** The clock sessions are billed by (injectable for tests). */
  now: () => Date;
}
