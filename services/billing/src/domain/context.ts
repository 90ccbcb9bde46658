/** What the money-moving operations need: the database, the chain, events and settings. */
import type { Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { Chain } from '../adapters/chain.ts';
import type { BillingDB } from '../db/schema.ts';
import type { EventSink } from './events.ts';

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
}
