/** Kysely table types of the billing database (NUMERIC columns are decimal strings). */
import type { AuditEventsTable } from '@gpu/common';
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Money = ColumnType<string, string, string>;

export type OwnerType = 'user' | 'provider';
export type WalletAccountKind = 'available' | 'locked' | 'pending_out';
export type SystemAccountKind = 'chain_incoming' | 'chain_outgoing' | 'platform_fees';
type AccountKind = WalletAccountKind | SystemAccountKind;
export type TransactionType = 'deposit' | 'withdrawal' | 'payment' | 'payout' | 'fee' | 'lock' | 'release';
export type TransactionStatus = 'pending' | 'confirmed' | 'failed';
export type HoldStatus = 'pending' | 'posted' | 'voided';

export interface WalletTable {
  id: string;
  owner_type: OwnerType;
  owner_id: string;
  /** The user who holds the wallet: the owner of a user wallet, the owner of a provider wallet's machine (null: unknown, admins and services only). */
  holder_id: string | null;
  /** Null only for a provider wallet opened on first need, until its owner names an address. */
  solana_address: string | null;
  /** When the holder proved control of `solana_address` (signed a challenge); null: not proven, no deposits. */
  address_proven_at: Date | null;
  address_challenge: string | null;
  address_challenge_expires_at: Date | null;
  /** A provider wallet's automatic payout address (earnings paid on chain after a session ends); null: off. */
  auto_payout_to: Generated<string | null>;
  /** Automatic payouts that failed in a row, and the earliest next attempt (null: now). */
  auto_payout_failures: Generated<number>;
  auto_payout_retry_at: Generated<Date | null>;
  /** Why the last automatic payout failed (null: it did not, or the setting was saved since). */
  auto_payout_last_failure: Generated<string | null>;
  created_at: Timestamp;
}

interface LedgerAccountTable {
  id: string;
  wallet_id: string | null;
  kind: AccountKind;
  non_negative: boolean;
  balance: Generated<string>;
  debits_total: Generated<string>;
  credits_total: Generated<string>;
  created_at: Timestamp;
}

export interface HoldTable {
  id: string;
  wallet_id: string;
  status: HoldStatus;
  amount: Money;
  posted: Generated<string>;
  released: Generated<string>;
  reference: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface TransactionTable {
  id: string;
  wallet_id: string;
  type: TransactionType;
  status: TransactionStatus;
  amount: Money;
  fee: Generated<string>;
  signature: string | null;
  destination: string | null;
  serialized_tx: string | null;
  last_valid_block_height: number | null;
  failure_reason: string | null;
  hold_id: string | null;
  reference: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  confirmed_at: Date | null;
}

interface LedgerTransferTable {
  id: string;
  debit_account_id: string;
  credit_account_id: string;
  amount: Money;
  code: string;
  transaction_id: string | null;
  hold_id: string | null;
  reverses_transfer_id: string | null;
  created_at: Timestamp;
}

interface IdempotencyKeyTable {
  key: string;
  request_hash: string;
  transaction_id: string | null;
  response_status: number | null;
  response_body: unknown;
  created_at: Timestamp;
}

interface OutboxEventTable {
  id: string;
  kind: string;
  payload: unknown;
  correlation_id: string | null;
  created_at: Timestamp;
  published_at: Date | null;
}

interface BillingMetaTable {
  key: string;
  value: string;
}

export interface ProviderRatesTable {
  provider_id: string;
  /** Normalised model name → hourly rate (decimal string); may hold `default`. */
  base_rates: ColumnType<Record<string, string>, string, string>;
  vram_rate_per_gb_hour: string | null;
  power_rate_per_watt_hour: string | null;
  updated_at: Timestamp;
  /** The `updated_at` of the rates last recorded for the market; null: never (0015). */
  announced_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** The lowest bid per GPU-hour the machine accepts for an interruptible lease; null: it takes no bids (0033). */
  bid_floor: ColumnType<string | null, string | null | undefined, string | null>;
}

export type SessionStatus = 'active' | 'grace_period' | 'completed' | 'terminated';

/** A session's rate from one minute of its clock on (`rental_sessions.rate_segments`). */
export interface RateSegment {
  /** The first minute of the session's clock billed at this rate (0: its first). */
  from_minute: number;
  /** The session's total hourly rate from then. */
  hourly_rate: string;
  /** Its bid per GPU-hour then. */
  bid: string | null;
}

export interface RentalSessionTable {
  id: string;
  user_id: string;
  wallet_id: string;
  provider_id: string;
  provider_wallet_id: string;
  /** The user who owns the provider machine (null: unknown, only admins and services report its usage). */
  provider_owner_id: string | null;
  /**
   * The daemon client the machine is bound to, from the registry (0023): only that daemon reports the session's usage
   * and workload; null: any daemon of the owner (a machine bound to none, or billing without a registry).
   */
  provider_client_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** Started from the registry's record: the session holds GPUs of the machine (`gpu_leases`). */
  reserves_machine: Generated<boolean>;
  /** The machine's GPUs the session rents, by their index in the registry's record (null: none named). */
  gpu_indices: number[] | null;
  job_id: string;
  gpu_model: string;
  gpu_count: number;
  requested_vram_mb: number;
  estimated_power_w: number;
  actual_power_w: string | null;
  rate_key: string;
  /** Whose rate priced it: the platform's card, the provider's own rates, or the renter's bid (interruptible). */
  rate_source: 'platform' | 'provider' | 'bid';
  base_rate_per_gpu: string;
  base_hourly_rate: string;
  vram_hourly_rate: string;
  power_hourly_rate: string;
  demand_multiplier: string;
  supply_factor: string;
  total_hourly_rate: string;
  platform_fee_percent: string;
  status: SessionStatus;
  hold_id: string;
  lock_transaction_id: string | null;
  billed_minutes: Generated<number>;
  total_cost: Generated<string>;
  started_at: Timestamp;
  last_usage_at: Date | null;
  grace_until: Date | null;
  ended_at: Date | null;
  /** Its usage records were deleted, `billing.usage_retention` after it ended. */
  usage_purged: Generated<boolean>;
  end_reason: string | null;
  /** The most the session may cost in all (null: no cap); it ends once its cost reaches it. */
  spend_cap: Money | null;
  /** When the renter was last warned that the funds left pay for little running time (null: not low). */
  low_balance_at: Date | null;
  /** When a capped session's cap is spent at its frozen rate: it ends then (null: no cap, or not billed yet). */
  cap_ends_at: Date | null;
  /** Whether the session runs a workload (then it is billed from `billed_from`, once the workload runs). */
  workload: Generated<boolean>;
  /** When a workload session's billing started (its workload ran); null until then, and for other sessions. */
  billed_from: Date | null;
  /**
   * The W3C trace context of the request that started it (`traceparent`, `tracestate`; migration 0025): its daemon's
   * reports continue that trace. Null when tracing was off.
   */
  trace_context: ColumnType<Record<string, string> | null, string | null | undefined, never>;
  /** An interruptible session's bid per GPU-hour (0033); null: on demand, never preempted. */
  bid: ColumnType<string | null, string | null | undefined, string | null>;
  /** The session whose start took this one's GPUs (it ended `preempted`, 0033); null: not preempted. */
  preempted_by: ColumnType<string | null, string | null | undefined, string | null>;
  /** The highest bid among the sessions whose GPUs this one's start took (0041): its bid stays above it. */
  outbid: ColumnType<string | null, string | null | undefined, never>;
  /**
   * The rates by minute of the session's clock once its bid changed (0034; domain/pricing/pricing.ts),
   * ascending, the last one in force; null: one rate (`total_hourly_rate`) from its first minute.
   */
  rate_segments: ColumnType<RateSegment[] | null, string | null | undefined, string | null>;
  created_at: Timestamp;
  updated_at: Timestamp;
}

/** The states of a workload (migration 0016). */
export type WorkloadState = 'pending' | 'preparing' | 'running' | 'exited' | 'failed' | 'stopped';

/** What a session runs (migration 0016). */
export interface SessionWorkloadTable {
  session_id: string;
  spec: ColumnType<unknown, string, string>;
  state: WorkloadState;
  exit_code: number | null;
  reason: string | null;
  created_at: Timestamp;
  preparing_at: Date | null;
  running_at: Date | null;
  ended_at: Date | null;
  updated_at: Timestamp;
  /** What its daemon uploaded at its end (migration 0017): `[{key, bucket, size}]`. */
  outputs: ColumnType<unknown, string | null | undefined, string | null>;
  outputs_refused: ColumnType<unknown, string | null | undefined, string | null>;
  /** Bytes renters sent into it and received from it through the relay (migration 0027; bigint, as text). */
  reach_bytes_in: ColumnType<string, never, string>;
  reach_bytes_out: ColumnType<string, never, string>;
  /** When its daemon said the ended workload's final checkpoint, kept or none (migration 0038). */
  final_checkpoint_at: ColumnType<Date | null, never, Date | null>;
}

export interface UsageRecordTable {
  id: string;
  session_id: string;
  message_id: string;
  reported_at: Timestamp;
  gpu_utilization: string;
  power_draw_w: string;
  metrics: unknown;
  billed_minutes: number;
  cost: Money;
  created_at: Timestamp;
}

export interface BillingRecordTable {
  id: string;
  session_id: string;
  user_id: string;
  wallet_id: string;
  provider_id: string;
  provider_wallet_id: string;
  provider_owner_id: string | null;
  job_id: string;
  gpu_model: string;
  gpu_count: number;
  status: 'completed' | 'terminated';
  end_reason: string | null;
  total_hourly_rate: string;
  billed_minutes: number;
  total_cost: Money;
  platform_fee: Money;
  provider_earnings: Money;
  payment_transaction_id: string | null;
  /** The session's spend cap (null: none). */
  spend_cap: Money | null;
  started_at: Timestamp;
  ended_at: Timestamp;
  created_at: Timestamp;
}

/** A period of a user's stored bytes, billed (migration 0012). */
export interface StorageChargeTable {
  id: string;
  user_id: string;
  /** The user's wallet charged; null when the user had none (all of the cost unpaid). */
  wallet_id: string | null;
  period_start: Timestamp;
  period_end: Timestamp;
  /** bigint, read as a number (the database's int8 parser; at most 2^53 - 1, as reports are). */
  bytes: number;
  gb_hours: string;
  rate_per_gb_hour: string;
  cost: Money;
  charged: Money;
  unpaid: Money;
  transaction_id: string | null;
  created_at: Generated<Date>;
}

/** A GPU of a machine held by a running session or by a reservation until it expires (migration XIII). */
interface GpuLeaseTable {
  provider_id: string;
  gpu_index: number;
  session_id: string | null;
  reservation_id: string | null;
  user_id: string | null;
  expires_at: Date | null;
  created_at: Generated<Date>;
}

/** The version of billing's last statement of a machine's held GPUs (domain/leases/held.ts). */
interface MachineLeaseVersionTable {
  provider_id: string;
  version: ColumnType<string, number, number>;
}

/** A session event as billing recorded it, for the session's parties to read (GET /billing/events). */
export interface SessionEventTable {
  /** The event's `event_id`. */
  id: string;
  session_id: string;
  /** The renter. */
  user_id: string;
  provider_owner_id: string | null;
  kind: string;
  occurred_at: Generated<Date>;
  /** The event's data in the wire shape (`session`, and `billing_record` once ended), written as JSON text. */
  data: ColumnType<unknown, string, never>;
}

/** Whether withdrawals and payouts are paused, and why (one row; migration XXI; domain/reserves/pause.ts). */
export interface PayoutPauseTable {
  id: Generated<boolean>;
  /** When they were paused; null: they are not. */
  paused_at: Date | null;
  cause: 'reserve_shortfall' | 'operator' | null;
  /** Why, in words: the operator's, or what the check found. */
  reason: string | null;
  /** The operator's ID (null for the reserve check). */
  paused_by: string | null;
  /** The reserve check's figures (gap, required, treasury balance, ratio), written as JSON text. */
  details: ColumnType<Record<string, unknown>, string | undefined, string>;
}

/** Which billing instance holds each machine's relay connection (migration 0026; domain/reach/). */
/** The platform's SSH host key for renters (migration 0027): one row. */
interface ReachHostKeyTable {
  id: number;
  /** PEM. */
  private_key: string;
  created_at: Generated<Date>;
}

interface ReachLinkTable {
  provider_id: string;
  instance_id: string;
  /** Where the other instances reach that instance (`reach.advertise_url`). */
  url: string;
  link_id: string;
  connected_at: Date;
  seen_at: Date;
}

/** A browser's way into a port of a rented workload (migration 0031; domain/reach/port-grants.ts). */
interface PortGrantTable {
  /** SHA-256 of the secret (a link's ticket, or a browser's cookie). */
  secret_hash: Buffer;
  kind: 'ticket' | 'cookie';
  session_id: string;
  port: number;
  user_id: string;
  key_id: string | null;
  sign_in_id: string | null;
  expires_at: Date;
  created_at: Date;
}

export type JobState = 'queued' | 'placing' | 'running' | 'recovering' | 'succeeded' | 'failed' | 'cancelled';

/** A renter's job (migration 0028; domain/jobs/). */
export interface JobTable {
  id: string;
  user_id: string;
  wallet_id: string;
  name: string | null;
  /** The submit's `Idempotency-Key` (unique per user). */
  idempotency_key: string | null;
  /** The hash of the submit that key came with (domain/idempotency.ts `requestHash`; null before migration 0040). */
  request_hash: string | null;
  /** What a machine must offer (domain/jobs/job.ts `JobTerms`). */
  terms: ColumnType<unknown, string, string>;
  /** The workload each attempt runs (a `WorkloadSpec`). */
  workload: ColumnType<unknown, string, string>;
  max_attempts: number;
  retry_on_failure: boolean;
  spend_cap: Money;
  state: JobState;
  reason: string | null;
  attempts: Generated<number>;
  /** The session of the attempt placed last (null before the first). */
  session_id: string | null;
  /** What its ended attempts cost together. */
  spent: ColumnType<string, string | undefined, string>;
  /** Not placed before this (a failed try waits a little). */
  place_after: Timestamp;
  /** A placement under way ends by then (a placer killed mid-way: another takes the job over). */
  placing_until: Date | null;
  /** A queued job still unplaced then ends (null: it waits as long as it takes). */
  queued_until: Date | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  ended_at: Date | null;
  /** The attempt whose checkpoint was said whole last (migration 0029): its session names the object. */
  checkpoint_session: ColumnType<string | null, never, string | null>;
  checkpoint_size: ColumnType<string | null, never, number | null>;
  checkpoint_at: ColumnType<Date | null, never, Date | null>;
  /** Not placed again before this, unless the ended attempt's final checkpoint is said whole sooner (migration 0032). */
  final_checkpoint_until: ColumnType<Date | null, never, Date | null>;
}

/** One session a job ran as (migration 0028). */
export interface JobAttemptTable {
  job_id: string;
  n: number;
  session_id: string;
  provider_id: string;
  started_at: Timestamp;
  ended_at: Date | null;
  cost: Money | null;
  end_reason: string | null;
}

export interface BillingDB {
  jobs: JobTable;
  job_attempts: JobAttemptTable;
  provider_rates: ProviderRatesTable;
  rental_sessions: RentalSessionTable;
  session_workloads: SessionWorkloadTable;
  usage_records: UsageRecordTable;
  billing_records: BillingRecordTable;
  billing_meta: BillingMetaTable;
  wallets: WalletTable;
  ledger_accounts: LedgerAccountTable;
  /** Money-out actions, append-only (migration 0018; @gpu/common's audit-trail.ts). */
  audit_events: AuditEventsTable;
  holds: HoldTable;
  transactions: TransactionTable;
  ledger_transfers: LedgerTransferTable;
  idempotency_keys: IdempotencyKeyTable;
  outbox_events: OutboxEventTable;
  payout_pause: PayoutPauseTable;
  storage_charges: StorageChargeTable;
  gpu_leases: GpuLeaseTable;
  machine_lease_versions: MachineLeaseVersionTable;
  session_events: SessionEventTable;
  reach_links: ReachLinkTable;
  reach_host_key: ReachHostKeyTable;
  port_grants: PortGrantTable;
}
