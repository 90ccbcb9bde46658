/**
 * The events billing publishes, as domain values. Domain code records an
 * event inside the database transaction of the change it describes; the
 * implementation (adapters/billing-events.ts) writes it into common's
 * transactional outbox with its wire body, and an `OutboxRelay` publishes it
 * on `<prefix>.<kind>` (NATS `billing.events.*`) once the change committed.
 */
import type { GPUS_HELD_EVENT_KIND, SESSION_ENDED_EVENT_KINDS, SESSION_RUNNING_EVENT_KINDS } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import type { BillingRecordRow } from '../db/billing-record-repository.ts';
import type { BillingDB } from '../db/schema.ts';
import type { SessionRow } from '../db/session-repository.ts';
import type { TransactionRow } from '../db/transaction-repository.ts';

/** The platform's price card as billing announces it (to the registry's market: its offers' prices). */
interface AnnouncedCard {
  baseRates: Record<string, string>;
  vramRatePerGbHour: string;
  powerRatePerWattHour: string;
  /** Each model key's (and `default`'s) demand and supply factors, as billing applies them now. */
  factors: Record<string, { demand: string; supply: string }>;
  at: Date;
}

/** A machine's own rates as billing stored them. */
interface AnnouncedProviderRates {
  providerId: string;
  baseRates: Record<string, string>;
  vramRatePerGbHour: string | null;
  powerRatePerWattHour: string | null;
  /** The lowest bid per GPU-hour it takes; null: none. */
  bidFloor: string | null;
  at: Date;
}

/** Kinds of withdrawal and payout events. */
type PayoutEventKind = `${'withdrawal' | 'payout'}.${'pending' | 'confirmed' | 'failed'}`;

/** Every event billing publishes, with what it is about. */
export type BillingEvent =
  | { kind: 'deposit.rejected'; walletId: string; signature: string; reason: string }
  | { kind: 'deposit.confirmed'; transaction: TransactionRow; sourceOwner: string; slot: number }
  | { kind: PayoutEventKind; transaction: TransactionRow }
  | {
      kind: (typeof SESSION_RUNNING_EVENT_KINDS)[number];
      session: SessionRow;
    }
  | { kind: (typeof SESSION_ENDED_EVENT_KINDS)[number]; session: SessionRow; billingRecord: BillingRecordRow }
  /** The session's workload runs: billing started. */
  | { kind: 'workload.running'; session: SessionRow }
  /**
   * A nudge to a machine's daemon: a workload session on it started or ended. Published on the machine's own subject
   * (`<prefix>.machine.<owner_id>.<provider_id>`: its daemon listens; a daemon's NATS user may hear its owner's
   * machines' only), carrying no more than the IDs; the daemon reads the rest from billing with its own token, so a
   * nudge lost or forged changes nothing but when it looks. A machine without a known owner: `none` in its place.
   */
  | {
      kind: 'machine.sessions';
      providerId: string;
      ownerId: string | null;
      sessionId: string;
      change: 'started' | 'ended';
    }
  | { kind: 'pricing.platform_rates'; card: AnnouncedCard }
  | { kind: 'pricing.provider_rates'; rates: AnnouncedProviderRates }
  /**
   * The GPUs billing's leases hold on a machine after a change of them, by index, numbered by a version that grows with
   * each statement of the machine (domain/leases/held.ts): the registry's market keeps the newest.
   */
  | {
      kind: typeof GPUS_HELD_EVENT_KIND;
      providerId: string;
      version: number;
      gpuIndices: number[];
      /** The held GPUs that interruptible sessions hold, by index: their bids per GPU-hour. */
      bids: Record<string, string>;
    };

/** The kinds of a session's events (its parties read them over HTTP too: GET /billing/events). */
export type SessionEventKind = Extract<BillingEvent, { session: SessionRow }>['kind'];

/** Where domain code records events: inside the transaction of the change (or on the database, for a refusal). */
export interface BillingEvents {
  record(db: Transaction<BillingDB> | Kysely<BillingDB>, event: BillingEvent, correlationId?: string): Promise<void>;
}
