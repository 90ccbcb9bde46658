/**
 * Starting a rental session. One database transaction: lock the renter's
 * accounts, check `minimum_balance` and that the available balance covers the
 * initial period, place the hold for it (its `lock` transaction is the
 * session's lock transaction), freeze the rates, write the session and the
 * `session.started` event. Refused starts (INSUFFICIENT_FUNDS) change nothing; concurrent
 * starts on one wallet serialise on the account locks and never overdraw.
 */
import { randomUUID } from 'node:crypto';
import {
  activeTraceContext,
  isLockConflict,
  isPrivileged,
  type Principal,
  type WorkloadSpec,
  withRetry,
} from '@gpu/common';
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { insertSession } from '../../db/session-repository.ts';
import { lockRecordIdOfHold } from '../../db/transaction-repository.ts';
import { isUniqueViolation } from '../../db/unique-violation.ts';
import { insertWorkload } from '../../db/workload-repository.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import type { KeyClaim } from '../idempotency.ts';
import {
  assertRentable,
  couldLease,
  type LeaseRequest,
  leaseToSession,
  type RentedResources,
  takeGpus,
} from '../leases/index.ts';
import { createHold, Dec, lockWalletAvailable } from '../ledger/index.ts';
import { bidRates, costOfHours, costOfMinutes, formatRate, ratesFor } from '../pricing/index.ts';
import type { ProviderRecord } from '../provider-directory.ts';
import { findWalletByOwner, providerWalletOf, type Wallet, walletFor } from '../wallets/index.ts';
import { assertBidTaken, preemptSessions } from './bids.ts';
import { capDeadline } from './clock.ts';
import { afterSessionsEnded, type SessionEnd } from './end.ts';
import type { SessionRow } from './session.ts';

export interface StartSessionInput {
  /** Who starts it: the wallet's holder (or an admin or service). */
  actor: Principal;
  /** The renter (default: the calling user; a machine client must name one). */
  userId?: string;
  walletId: string;
  providerId: string;
  /** The job the session runs (default: the session's own ID). */
  jobId?: string;
  /** The GPU model to rent (default: the machine's, when its GPUs are all of one model). */
  gpuModel?: string;
  gpuCount: number;
  requestedVramMb: number;
  estimatedPowerW: number;
  /** The highest total hourly rate the renter accepted (required of users; admins and services may omit it). */
  acceptedHourlyRate?: string;
  /** A scheduler's reservation of GPUs on the machine for this renter: the session rents exactly those GPUs. */
  reservationId?: string;
  /** The most the session may cost in all: it ends there (sessions/billing.ts), and no more is ever held for it. */
  spendCap?: Dec;
  /**
   * Interruptible at this bid per GPU-hour (the machine must take bids, at least its floor): the renter pays the bid,
   * and a higher bid or an on-demand start may take the GPUs back (bids.ts). Absent: on demand.
   */
  bid?: Dec;
  /** What the session runs (checked by the route): then it is billed only while its workload runs. */
  workload?: WorkloadSpec;
  /**
   * Checked first inside the start's transaction, before anything is locked or written: a caller's own condition
   * (a job's placer: it still holds the job and its attempt is open), which throws to start nothing.
   */
  guard?: (trx: Transaction<BillingDB>) => Promise<void>;
  /** The new session's ID, when the caller chose it beforehand (a workload's files are named after it). */
  sessionId?: string;
  correlationId?: string;
}

/** The token's smallest unit at `scale` decimals. */
const unitOf = (scale: number) => new Dec(1).div(new Dec(10).pow(scale));

/** Whole minutes `funds` pay for at `hourlyRate`. */
export function runtimeMinutes(funds: Dec, hourlyRate: Dec): number {
  return funds.mul(60).div(hourlyRate).floor().toNumber();
}

/** A started session, what was held for it and what the renter's balance pays for. */
export interface SessionStart {
  session: SessionRow;
  /** The initial period's cost, held. */
  holdAmount: Dec;
  /** Available in the wallet after the hold. */
  availableAfter: Dec;
  /** Whole minutes the available balance (before the hold) pays for. */
  estimatedRuntimeMinutes: number;
  /** The interruptible sessions whose GPUs this start took (each ended `preempted`). */
  preempted: SessionEnd[];
}

/** What a start asked for, with the renter and the job derived when left out. */
type StartRequest = StartSessionInput & { userId: string; jobId: string };

/** What the start asks of the machine's leases: a start may take GPUs from the interruptible sessions it outbids. */
const leaseRequest = (input: StartRequest): LeaseRequest => ({
  ...input,
  renterId: input.userId,
  bid: input.bid?.toFixed(),
  mayPreempt: true,
});

/** The highest bid among the sessions a start took GPUs from, which its own bid must stay above (null: none). */
function highestBid(taken: SessionEnd[]): string | null {
  let top: Dec | null = null;
  for (const { session } of taken) {
    if (session.bid !== null && (top === null || new Dec(session.bid).gt(top))) top = new Dec(session.bid);
  }
  return top?.toFixed() ?? null;
}

/** Without a registry's record of the machine, what the renter declares is priced: the model must be named. */
function declaredResources(input: StartRequest): RentedResources {
  if (input.gpuModel === undefined) throw billingErrors.gpuModelRequired([]);
  return { ...input, gpuModel: input.gpuModel };
}

/** The renter a start is for: the one named, else the calling user (a machine client must name one). */
export function renterOf(asked: Pick<StartSessionInput, 'actor' | 'userId'>): string {
  const userId = asked.userId ?? (asked.actor.kind === 'user' ? asked.actor.subject : undefined);
  if (userId === undefined) throw billingErrors.userIdRequired();
  return userId;
}

/** Starts a session: the session with its frozen rates, the hold and the estimated runtime. */
export async function startSession(
  ctx: BillingContext,
  asked: StartSessionInput,
  idem: KeyClaim<SessionStart> | null,
): Promise<SessionStart> {
  const userId = renterOf(asked);
  const wallet = await walletFor(ctx, asked.actor, asked.walletId);
  if (wallet.ownerType !== 'user' || wallet.ownerId !== userId) {
    throw billingErrors.walletOwnerMismatch(wallet.id, userId);
  }
  const id = asked.sessionId ?? randomUUID();
  // With a registry: the machine must be known and up, and its record prices the GPUs the session leases; its
  // provider wallet is opened on first need. Without one: the provider needs a wallet, and the renter's figures are
  // used.
  let machine: ProviderRecord | null = null;
  let providerWallet: Wallet;
  let providerOwnerId: string | null;
  // The daemon the machine is bound to: it alone reports the session (access.ts); none without a registry's record.
  let providerClientId: string | null = null;
  if (ctx.providers) {
    machine = await ctx.providers.provider(asked.providerId, asked.correlationId);
    if (!machine) throw billingErrors.providerNotFound(asked.providerId);
    assertRentable(machine);
    providerWallet = await providerWalletOf(ctx, machine);
    providerOwnerId = machine.ownerId;
    providerClientId = machine.daemonClientId;
  } else {
    if (asked.reservationId) throw billingErrors.reservationNotFound(asked.reservationId);
    const found = await findWalletByOwner(ctx.db, 'provider', asked.providerId);
    if (!found) throw billingErrors.providerWalletNotFound(asked.providerId);
    providerWallet = found;
    providerOwnerId = found.holderId;
  }
  const input: StartRequest = { ...asked, userId, jobId: asked.jobId ?? id };
  // Bids are for machines whose leases billing keeps (a registry's record); reservations are on-demand GPUs.
  if (input.bid && (!machine || input.reservationId)) throw billingErrors.bidsNotAccepted(asked.providerId);
  // Refused before any lock when the machine could never give what is asked (too small a group, too few GPUs, no
  // model named where one must be); without a registry's record, the renter's figures are priced.
  if (machine) couldLease(machine, leaseRequest(input));
  else declaredResources(input);
  const minimum = new Dec(ctx.sessions.minimumBalance);

  const run = async (trx: Transaction<BillingDB>): Promise<SessionStart> => {
    await input.guard?.(trx);
    // The GPUs first, under the machine's lease lock: the price is the price of the GPUs the session gets, and the
    // session starts when its lease does (the time read under the lock, after the previous holder's end committed).
    if (input.bid) await assertBidTaken(trx, input.providerId, input.bid);
    const lease = machine ? await takeGpus(trx, machine, leaseRequest(input), ctx.now) : null;
    const now = lease?.at ?? ctx.now();
    const resources = lease ? lease.resources : declaredResources(input);
    // The sessions it outbids end now, their GPUs leased to this one below (same transaction).
    const preempted = lease
      ? await preemptSessions(
          ctx,
          trx,
          lease.preempt,
          { sessionId: id, walletId: wallet.id, at: now, bid: input.bid?.toFixed(), actor: input.actor },
          input.correlationId,
        )
      : [];
    // Their ends noted the machine's leases changed; `leaseToSession` states them once, with this session's.
    const priced = { ...resources, providerId: input.providerId };
    const rates = input.bid
      ? bidRates(priced, input.bid, ctx.pricing.platformFeePercent)
      : await ratesFor(trx, ctx.pricing, priced);
    // The renter starts at a price they accepted; the rates are then frozen for the session's life. A refusal names
    // the rate exactly, so that accepting the figure it names starts the session.
    if (input.acceptedHourlyRate === undefined) {
      if (!isPrivileged(input.actor)) throw billingErrors.acceptedRateRequired();
    } else if (rates.totalHourlyRate.gt(input.acceptedHourlyRate)) {
      throw billingErrors.priceNotAccepted(formatRate(rates.totalHourlyRate, ctx.scale), input.acceptedHourlyRate);
    }
    const fmt = (d: Dec) => d.toFixed(ctx.scale);
    // A cap pays for at least the first billed minute: a session never runs on GPU time nobody pays.
    const firstMinute = Dec.max(costOfMinutes(rates.totalHourlyRate, 1, ctx.scale), unitOf(ctx.scale));
    if (input.spendCap?.lt(firstMinute)) throw billingErrors.spendCapTooLow(fmt(input.spendCap), fmt(firstMinute));
    const period = Dec.max(
      costOfHours(rates.totalHourlyRate, new Dec(ctx.sessions.initialPeriodMs).div(3_600_000), ctx.scale),
      unitOf(ctx.scale),
    );
    // A session that may cost no more than its cap never holds more than it.
    const initial = input.spendCap ? Dec.min(period, input.spendCap) : period;
    const available = await lockWalletAvailable(trx, wallet.id);
    if (available.lt(minimum)) throw billingErrors.belowMinimumBalance(wallet.id, fmt(available), fmt(minimum));
    if (available.lt(initial)) throw billingErrors.insufficientFunds(wallet.id, fmt(available), fmt(initial));
    const hold = await createHold(trx, wallet.id, initial, `session:${id}`, { now, accountIds: ctx.state.accountIds });
    // Taking GPUs back ends someone else's work: a session that did is billed from its start, its workload's
    // preparation included, so that ending it before its workload runs does not make an eviction free.
    const billedFromStart = preempted.length > 0;
    const lockTxId = await lockRecordIdOfHold(trx, hold.id);
    const session = await insertSession(trx, {
      id,
      user_id: input.userId,
      wallet_id: wallet.id,
      provider_id: input.providerId,
      provider_wallet_id: providerWallet.id,
      provider_owner_id: providerOwnerId,
      provider_client_id: providerClientId,
      reserves_machine: ctx.providers !== null,
      job_id: input.jobId,
      gpu_model: rates.gpuModel,
      gpu_count: resources.gpuCount,
      gpu_indices: lease?.indices ?? null,
      requested_vram_mb: resources.requestedVramMb,
      estimated_power_w: resources.estimatedPowerW,
      actual_power_w: null,
      rate_key: rates.rateKey,
      rate_source: rates.rateSource,
      base_rate_per_gpu: rates.baseRatePerGpu.toFixed(),
      base_hourly_rate: rates.baseHourlyRate.toFixed(),
      vram_hourly_rate: rates.vramHourlyRate.toFixed(),
      power_hourly_rate: rates.powerHourlyRate.toFixed(),
      demand_multiplier: rates.demandMultiplier.toFixed(),
      supply_factor: rates.supplyFactor.toFixed(),
      total_hourly_rate: rates.totalHourlyRate.toFixed(),
      platform_fee_percent: rates.platformFeePercent.toFixed(),
      status: 'active',
      hold_id: hold.id,
      lock_transaction_id: lockTxId,
      started_at: now,
      last_usage_at: null,
      grace_until: null,
      ended_at: null,
      end_reason: null,
      spend_cap: input.spendCap?.toFixed() ?? null,
      // A workload session's cap counts from when its workload runs (workloads/reports.ts), unless its clock starts
      // now: one that took GPUs back is billed from its start (`billedFromStart`).
      cap_ends_at: input.workload && !billedFromStart ? null : capDeadline(input.spendCap, rates.totalHourlyRate, now),
      workload: input.workload !== undefined,
      billed_from: billedFromStart ? now : null,
      low_balance_at: null,
      // The trace the daemon's reports on the session continue (tracing on: the start-session request's).
      trace_context: traceContextColumn(),
      bid: input.bid?.toFixed() ?? null,
      preempted_by: null,
      outbid: highestBid(preempted),
      created_at: now,
      updated_at: now,
    });
    if (input.workload) await insertWorkload(trx, id, input.workload, now);
    if (lease) {
      await leaseToSession(
        ctx,
        trx,
        { providerId: input.providerId, sessionId: id, indices: lease.indices },
        input.correlationId,
      );
    }
    const started: SessionStart = {
      session,
      holdAmount: initial,
      availableAfter: available.minus(initial),
      estimatedRuntimeMinutes: runtimeMinutes(available, rates.totalHourlyRate),
      preempted,
    };
    await ctx.events.record(trx, { kind: 'session.started', session }, input.correlationId);
    // Its machine's daemon starts the workload at once rather than at its next poll.
    if (input.workload) {
      await ctx.events.record(
        trx,
        {
          kind: 'machine.sessions',
          providerId: input.providerId,
          ownerId: session.provider_owner_id,
          sessionId: id,
          change: 'started',
        },
        input.correlationId,
      );
    }
    await idem?.claim(trx, lockTxId, started);
    return started;
  };

  try {
    // A start that takes sessions back locks their renters' wallets too; a transaction locking the same wallets in
    // another order (a usage batch topping up holds) may meet it in a deadlock, which PostgreSQL ends by failing one:
    // a start is retried then, from the beginning (it wrote nothing).
    const started = await withRetry(() => ctx.db.transaction().execute(run), {
      attempts: 3,
      retryable: isLockConflict,
    });
    afterPreemption(ctx, started.preempted, input.correlationId);
    return started;
  } catch (err) {
    if (isUniqueViolation(err, 'rental_sessions_running_job')) throw billingErrors.sessionAlreadyRunning(input.jobId);
    // The lease lock makes this the backstop only: another holder of one of the GPUs.
    if (isUniqueViolation(err, 'gpu_leases_pkey')) {
      throw billingErrors.providerNotAvailable(input.providerId, 'has its GPUs rented', 'busy');
    }
    throw err;
  }
}

/** What follows the preemptions of a committed start: counted, and what follows any end. */
function afterPreemption(ctx: BillingContext, ends: SessionEnd[], correlationId?: string): void {
  ctx.state.preemptions += ends.length;
  afterSessionsEnded(ctx, ends, correlationId);
}

/** The active trace context as `rental_sessions.trace_context` stores it (null: tracing off). */
function traceContextColumn(): string | null {
  const carrier = activeTraceContext();
  return carrier ? JSON.stringify(carrier) : null;
}
