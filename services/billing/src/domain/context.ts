/** What the money-moving operations need: the database, the chain, events and settings. */
import type { GroupCommit, Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { TransferRow } from '../db/ledger-repository.ts';
import type { BillingDB } from '../db/schema.ts';
import { BoundedCache } from './bounded-cache.ts';
import type { Chain } from './chain/chain.ts';
import type { BillingEvents } from './events.ts';
import type { Dec } from './ledger/money.ts';
import type { MarketFactors, RateCard } from './pricing/pricing.ts';
import type { ProviderDirectory } from './provider-directory.ts';
import type { ReserveReport } from './reserves/report.ts';
import type { BatchedUsageResult, BatchedUsageUpdate } from './sessions/usage-message.ts';
import type { WithdrawalLimit } from './wallets/withdrawal-limit.ts';
import type { WorkloadStorage } from './workload-storage.ts';

/** Pricing settings (config `pricing`) and the pluggable demand/supply factors. */
export interface PricingSettings {
  card: RateCard;
  platformFeePercent: string;
  market: MarketFactors;
  /** Tokens per GB-hour of stored bytes (config `pricing.storage_rate_per_gb_hour`). */
  storageRatePerGbHour: string;
  /** The highest rates a provider may set (config `pricing.provider_rate_limits`). */
  providerLimits: { baseRate: string; vramRatePerGbHour: string; powerRatePerWattHour: string };
}

/** Rental-session settings (config `billing`), as milliseconds and decimal strings. */
interface SessionSettings {
  initialPeriodMs: number;
  holdTopUpBelowMs: number;
  /** Funds for less running than this warn the renter (config `billing.low_balance_warning`; 0: never). */
  lowBalanceWarningMs: number;
  minimumBalance: string;
  gracePeriodMs: number;
  billingIntervalMs: number;
  /**
   * How far a usage report's timestamp may be ahead of billing's clock, or before its session's start, and still be
   * applied (config `billing.max_clock_skew`): the daemon's clock and billing's differ a little.
   */
  maxClockSkewMs: number;
  /** How long a session's workload may take to run before the session ends unbilled (`billing.workload_start_timeout`). */
  workloadStartTimeoutMs: number;
  /** How long after a workload's end its daemon may upload its logs and outputs (`billing.workload_upload_window`). */
  workloadUploadWindowMs: number;
  /** A preempted session's workload's time from its notice to SIGKILL (`billing.preemption_grace`). */
  preemptionGraceMs: number;
}

/**
 * What one app keeps in memory between requests. It belongs to the context (made by `newBillingState`), never to
 * a module, so two apps in one process share nothing; copies of a context (`withRequestLogger`) share it.
 */
export interface BillingState {
  /** Ledger account IDs of wallets' sub-accounts by `<wallet>:<kind>` (they never change). */
  accountIds: BoundedCache<string>;
  /** The wire JSON of a session's frozen rates by their stored values (most sessions share a few rate sets). */
  ratesJson: BoundedCache<Readonly<Record<string, string>>>;
  /**
   * What an hourly rate costs over the session settings' periods (hold top-up threshold, billing interval,
   * initial period), by rate and settings: billing works them out for every session it bills, and most sessions
   * share a few rates (sessions/billing.ts).
   */
  ratePeriods: BoundedCache<RatePeriods>;
  /** Group commit of usage updates, made on first use (sessions/usage-updates.ts). */
  usageBatcher?: GroupCommit<BatchedUsageUpdate, BatchedUsageResult>;
  /** Group commit of transfers posted on their own, made on first use (ledger/group-commit.ts). */
  transferBatcher?: GroupCommit<TransferRow[], null>;
  /** Automatic payouts in flight in this instance, by provider wallet (wallets/auto-payout.ts). */
  autoPayouts: Map<string, Promise<unknown>>;
  /**
   * Runs this instance's jobs round now (background.ts sets it; a no-op without one): called when a job is submitted,
   * a session ends (its GPUs are free) or a machine's status changes, so queued jobs are placed at once rather than
   * at the next `jobs.place_interval`. `capacity`: GPUs may have come free, so the jobs waiting out their
   * `jobs.retry_interval` are tried in that round too.
   */
  wakeJobs: (capacity?: 'capacity') => void;
  /** Arms the expiry sweep for a reservation this instance made (background.ts), so its GPUs are stated free at once. */
  wakeReservations: () => void;
  /**
   * GPU-minutes this instance billed (a session's new billed minutes × its GPUs), for `billing_gpu_hours_billed_total`;
   * counted as the session rows are written, each session's minutes once (`minutesCounted`: a batch that failed and
   * is applied again one update at a time counts nothing twice). A transaction rolled back and never applied again
   * (rare) still counts.
   */
  gpuMinutesBilled: number;
  /** The billed minutes counted so far by session (the sessions billed lately). */
  minutesCounted: BoundedCache<number>;
  /** Interruptible sessions this instance's starts took GPUs from, for `billing_preemptions_total`. */
  preemptions: number;
  /** The last proof of reserves for the record (reserves/reserves.ts). */
  reserveReport?: ReserveReport;
  /** Told of every proof of reserves for the record: its metrics (adapters/reserve-metrics.ts). */
  reserveWatch?: (report: ReserveReport) => void;
}

/** An hourly rate and its cost over each of the session settings' periods, rounded as billing rounds them. */
export interface RatePeriods {
  hourly: Dec;
  topUpBelow: Dec;
  lowBalance: Dec;
  billingInterval: Dec;
  initialPeriod: Dec;
}

/** One entry per wallet sub-account: 200,000 entries are some 66,000 wallets. */
const ACCOUNT_CACHE_LIMIT = 200_000;
const RATES_CACHE_LIMIT = 1024;

/** Empty state for a new context. */
export function newBillingState(): BillingState {
  return {
    accountIds: new BoundedCache(ACCOUNT_CACHE_LIMIT),
    ratesJson: new BoundedCache(RATES_CACHE_LIMIT),
    ratePeriods: new BoundedCache(RATES_CACHE_LIMIT),
    autoPayouts: new Map(),
    wakeJobs: () => {},
    wakeReservations: () => {},
    gpuMinutesBilled: 0,
    preemptions: 0,
    minutesCounted: new BoundedCache(RATES_CACHE_LIMIT * 64),
  };
}

export interface BillingContext {
  db: Kysely<BillingDB>;
  /** Null when the blockchain section is not configured: chain operations refuse with SOLANA_NOT_CONFIGURED. */
  chain: Chain | null;
  /** Who owns provider machines (the provider registry); null when billing is configured without it. */
  providers: ProviderDirectory | null;
  /** Where workloads' files live (the storage service); null when billing is configured without it. */
  storage: WorkloadStorage | null;
  /** Where events are recorded (common's outbox, or nowhere without NATS). */
  events: BillingEvents;
  logger: Logger;
  /** The token's decimals: the scale of every amount. */
  scale: number;
  /** Commitment at which a sent transfer counts as confirmed. */
  commitment: 'processed' | 'confirmed' | 'finalized';
  minimumPayout: string;
  /** Tokens withheld from a payout that creates its destination's token account (`billing.token_account_fee`). */
  tokenAccountFee: string;
  /** How many withdrawals a wallet may make in an hour (`billing.withdrawals_per_hour`); null: no limit. */
  withdrawalLimit: WithdrawalLimit | null;
  pricing: PricingSettings;
  sessions: SessionSettings;
  /** The clock sessions are billed by (injectable for tests). */
  now: () => Date;
  /** Caches and batchers of this app. */
  state: BillingState;
}
