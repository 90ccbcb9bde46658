/**
 * Interruptible sessions: taken back by a start that outbids them, and their bids changed while they run.
 *
 * **Taken back** (domain/leases/policy.ts chooses whose): inside the transaction of the start that outbid it, under the machine's lease lock, each such session ends `preempted` at once. Billing ends at
 * the notice: the session is billed as any end is (every started minute, none after), its provider credited for what
 * ran, its GPUs leased to the start in the same transaction; its daemon stops the workload (SIGTERM, the grace
 * period, SIGKILL) and starts the new one on those GPUs once the old one is gone. The ended session names its winner
 * (`preempted_by`), so every preemption has exactly one.
 *
 * Locks: the machine's lease lock (the caller's), the taken sessions' rows (in ID order), then the wallets of their
 * renters and of the starting renter (in ID order) before anything is posted, so two starts taking back each other's
 * renters' sessions on two machines never deadlock. A transaction that locks the same wallets in another order (a
 * usage batch topping up holds) may still meet one in a deadlock: PostgreSQL fails one of them, and the start is
 * retried (start.ts).
 *
 * **A bid changed** (`POST /billing/sessions/{id}/bid`, `gpu bid`): its renter (or an admin or service) sets a new bid per GPU-hour; from then on the session holds its GPUs at the new bid (the market's
 * `outbid_above` moves with it), and it pays each minute at the highest rate in force during it (domain/pricing/pricing.ts).
 *
 * Under the machine's lease lock, as a start is: a start that chooses whose GPUs to take reads every bid under that
 * lock, so a raise that committed first protects the session, and one that comes after finds the session ended
 * (409 SESSION_NOT_ACTIVE). A preemption ends billing at once, so there is no pending preemption for a raise to stop.
 *
 * Refused clearly, changing nothing: an on-demand session (409 SESSION_NOT_INTERRUPTIBLE); a bid under the machine's
 * floor, or a machine that no longer takes bids (409 BID_BELOW_FLOOR, BIDS_NOT_ACCEPTED); a bid over what the renter
 * capped (409 BID_ABOVE_CAP: a job's `max_price_per_gpu_hour`, or a spend cap whose rest does not pay one more minute
 * at the new bid); a raise the renter's funds cannot hold for the next billing interval (402 INSUFFICIENT_FUNDS); a session whose bid
 * changed in over 1,000 of its minutes (409 TOO_MANY_BID_CHANGES: its rates by minute are read at every billing pass).
 * Setting the bid in force again changes nothing. Each change is an audit event (`session_bid_changed`).
 */
import { appendAudit, auditActor, isLockConflict, type Principal, withRetry } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import { findJob, jobOfSession } from '../../db/job-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { changeSessionRate, findSession, markPreemptedBy } from '../../db/session-repository.ts';
import { billingErrors } from '../../errors.ts';
import { assertSessionRenter } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { lockLeases, noteLeaseChange, stateNotedLeases } from '../leases/index.ts';
import { Dec, getHolds, lockWalletAvailable, walletBalances } from '../ledger/index.ts';
import { changedSegments, costOfMinutes, costOfSessionMinutes, findProviderRates } from '../pricing/index.ts';
import { billedElapsedMs, billedFrom, capDeadlineOf } from './clock.ts';
import { finishSession, type SessionEnd } from './end.ts';
import { isRunning, loadSession, type SessionRow } from './session.ts';

/** The end reason of a session whose GPUs were taken back. */
const PREEMPTED = 'preempted';

/**
 * Ends the sessions `sessionIds` as preempted by `winnerId`, which `walletId` starts (its renter's wallet, locked here
 * in order with theirs); those that ended meanwhile are left as they are (their GPUs are free already). The ends.
 */
export async function preemptSessions(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  sessionIds: readonly string[],
  /**
   * The start: its session, its renter's wallet, its lease's time (the taken sessions end then), its bid (absent: on
   * demand) and who asked for it (the audit trail's actor).
   */
  winner: { sessionId: string; walletId: string; at: Date; bid?: string; actor: Principal },
  correlationId?: string,
): Promise<SessionEnd[]> {
  if (sessionIds.length === 0) return [];
  const sessions = [];
  for (const id of [...sessionIds].sort()) {
    const session = await findSession(trx, id, true);
    if (session && isRunning(session)) sessions.push(session);
  }
  for (const walletId of [...new Set([winner.walletId, ...sessions.map((s) => s.wallet_id)])].sort()) {
    await lockWalletAvailable(trx, walletId);
  }
  const ends: SessionEnd[] = [];
  for (const session of sessions) {
    // Named before the end is written, so the end's row and its event carry the winner.
    await markPreemptedBy(trx, session.id, winner.sessionId);
    const named = { ...session, preempted_by: winner.sessionId };
    // Ended at the lease's time, not a moment later: the winner's lease never starts before their end.
    const kind = { status: 'completed' as const, reason: PREEMPTED, at: winner.at };
    const end = await finishSession(ctx, trx, named, kind, correlationId);
    ends.push(end);
    // In the trail, with the end it records: whose session, taken for whom, at what bids, billed what.
    await appendAudit(trx as Kysely<BillingDB>, {
      action: 'session_preempted',
      actor: auditActor(winner.actor),
      target: `session:${session.id}`,
      details: {
        preempted_by: winner.sessionId,
        provider_id: session.provider_id,
        renter_id: session.user_id,
        bid: session.bid,
        winning_bid: winner.bid ?? null,
        billed_minutes: end.billingRecord.billed_minutes,
        total_cost: end.billingRecord.total_cost,
      },
      requestId: correlationId ?? null,
    });
  }
  return ends;
}

/** The most rates by minute a session keeps (1,000 minutes of a bid changed every minute, about 16 hours). */
const MAX_RATE_SEGMENTS = 1000;

export interface BidChange {
  actor: Principal;
  sessionId: string;
  /** The new bid per GPU-hour. */
  bid: Dec;
  correlationId?: string;
}

/** Refuses a bid on a machine that takes none (its owner set no floor), or under its floor. */
export async function assertBidTaken(trx: Transaction<BillingDB>, providerId: string, bid: Dec): Promise<void> {
  const floor = (await findProviderRates(trx, providerId))?.bidFloor ?? null;
  if (floor === null) throw billingErrors.bidsNotAccepted(providerId);
  if (bid.lt(floor)) throw billingErrors.bidBelowFloor(providerId, bid.toFixed(), new Dec(floor).toFixed());
}

/** Changes a running session's bid; the session as it is now. */
export async function changeBid(ctx: BillingContext, change: BidChange): Promise<SessionRow> {
  const seen = await loadSession(ctx.db, change.sessionId);
  assertSessionRenter(change.actor, seen);
  if (seen.bid === null) throw billingErrors.notInterruptible(seen.id);
  const cap = await jobPriceCap(ctx, seen);
  if (cap !== null && change.bid.gt(cap)) {
    throw billingErrors.bidAboveCap(seen.id, change.bid.toFixed(), cap.toFixed(), 'the job');
  }
  const run = async (trx: Transaction<BillingDB>): Promise<SessionRow> => {
    await lockLeases(trx, seen.provider_id, ctx.now);
    const session = await loadSession(trx, seen.id, true);
    if (!isRunning(session)) throw billingErrors.sessionNotActive(session.id, session.status);
    if (new Dec(session.bid!).eq(change.bid)) return session;
    await assertBidTaken(trx, session.provider_id, change.bid);
    // A session that took bids' GPUs keeps outbidding them: cut to their bid or below, it would have taken them at it.
    if (session.outbid !== null && change.bid.lte(session.outbid)) {
      throw billingErrors.bidNotAboveOutbid(session.id, change.bid.toFixed(), new Dec(session.outbid).toFixed());
    }
    const now = ctx.now();
    const hourlyRate = change.bid.mul(session.gpu_count);
    // Before its clock starts, as at its first moment: the clock may start a little before it is reported
    // (`billing.max_clock_skew`), so the first minute is billed at the higher of the two bids as any minute is.
    const segments = changedSegments(
      session,
      { hourlyRate, bid: change.bid.toFixed() },
      billedFrom(session) === null ? 0 : billedElapsedMs(session, now),
    );
    // Every billing pass reads them: a session keeps a bounded number (one per minute at most in any case).
    if ((segments?.length ?? 0) > MAX_RATE_SEGMENTS)
      throw billingErrors.tooManyBidChanges(session.id, MAX_RATE_SEGMENTS);
    const changed: SessionRow = {
      ...session,
      bid: change.bid.toFixed(),
      base_rate_per_gpu: change.bid.toFixed(),
      base_hourly_rate: hourlyRate.toFixed(),
      total_hourly_rate: hourlyRate.toFixed(),
      rate_segments: segments,
    };
    changed.cap_ends_at = capDeadlineOf(changed);
    if (change.bid.gt(session.bid!)) await assertRaiseAffordable(ctx, trx, changed, now);
    const written = await changeSessionRate(trx, changed, now);
    // In the trail before the machine's leases are stated: the version row is the last lock a change takes
    // (leases/held.ts), after the audit chain's as a start's preemptions take them.
    await appendAudit(trx as Kysely<BillingDB>, {
      action: 'session_bid_changed',
      actor: auditActor(change.actor),
      target: `session:${session.id}`,
      details: {
        provider_id: session.provider_id,
        bid: written.bid,
        previous_bid: session.bid,
        total_hourly_rate: written.total_hourly_rate,
      },
      requestId: change.correlationId ?? null,
    });
    // The market's interruptible prices move with the bids held (lease.held carries them).
    noteLeaseChange(trx, session.provider_id);
    await stateNotedLeases(ctx, trx, change.correlationId);
    return written;
  };
  // A deadlock PostgreSQL ended by failing this change (another transaction locking the same rows in another
  // order) is tried again from the beginning: it wrote nothing.
  return withRetry(() => ctx.db.transaction().execute(run), { attempts: 3, retryable: isLockConflict });
}

/** A job's most per GPU-hour (its terms' `max_price_per_gpu_hour`); null for a session of the renter's own. */
async function jobPriceCap(ctx: BillingContext, session: SessionRow): Promise<Dec | null> {
  const jobId = jobOfSession(session.job_id);
  if (jobId === null) return null;
  const job = await findJob(ctx.db, jobId);
  const terms = job?.terms as { max_price_per_gpu_hour?: string } | undefined;
  return terms?.max_price_per_gpu_hour ? new Dec(terms.max_price_per_gpu_hour) : null;
}

/**
 * A raise must be paid for: within a spend cap, the cap's rest pays at least the next minute at the new rate; and the
 * hold with the renter's available balance covers the cost so far and the next billing interval at it.
 */
async function assertRaiseAffordable(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  changed: SessionRow,
  now: Date,
): Promise<void> {
  const hourly = new Dec(changed.total_hourly_rate);
  const minutes = Math.ceil(billedElapsedMs(changed, now) / 60_000);
  const soFar = costOfSessionMinutes(changed, minutes, ctx.scale);
  const fmt = (d: Dec) => d.toFixed(ctx.scale);
  const cap = changed.spend_cap === null ? null : new Dec(changed.spend_cap);
  if (cap?.lt(soFar.plus(costOfMinutes(hourly, 1, ctx.scale)))) {
    throw billingErrors.bidAboveCap(changed.id, changed.bid!, fmt(cap), 'its spend cap');
  }
  const interval = costOfMinutes(hourly, Math.ceil(ctx.sessions.billingIntervalMs / 60_000), ctx.scale);
  const held = new Dec((await getHolds(trx, [changed.hold_id])).get(changed.hold_id)?.remaining ?? 0);
  const available = new Dec((await walletBalances(trx, changed.wallet_id, ctx.scale))?.available ?? 0);
  const needed = cap ? Dec.min(cap, soFar.plus(interval)) : soFar.plus(interval);
  if (held.plus(available).lt(needed)) {
    throw billingErrors.insufficientFunds(changed.wallet_id, fmt(held.plus(available)), fmt(needed));
  }
}
