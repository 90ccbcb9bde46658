/**
 * Ending a rental session: the final cost (whole minutes at the frozen hourly
 * rate, one rounding), captured from the session's hold in one ledger post:
 * the platform fee to `platform_fees`, the rest to the provider wallet's
 * `available` account (transfer code `provider_earnings`), the remainder of the
 * hold released to the renter. Writes the payment records, the BillingRecord,
 * the session's final state and the `session.completed` / `session.terminated`
 * event, all in one transaction under the session's row lock. Ending an ended
 * session answers its existing record (idempotent, also under concurrency).
 *
 * Minutes: a normal end bills every started minute (partial minutes round
 * up); a termination for insufficient funds bills to the last full minute. A
 * session with a spend cap costs at most its cap. A workload session is billed
 * from when its workload ran (`billedFrom`), and one whose workload ended ends
 * at that time, billed to its last started minute.
 * Never fewer minutes than were already billed, unless the renter can't pay
 * them: the hold is topped up from the available balance first, and what
 * still can't be paid is cut to the last full minute the hold covers.
 */

import { randomUUID } from 'node:crypto';
import { PLATFORM_END_REASONS, type Principal } from '@gpu/common';
import type { Transaction } from 'kysely';
import { billingRecordOfSession, insertBillingRecord } from '../../db/billing-record-repository.ts';
import { releaseSessionGpus } from '../../db/gpu-lease-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { updateEndedSession } from '../../db/session-repository.ts';
import { insertTransactions } from '../../db/transaction-repository.ts';
import { assertSessionParty, endsAsProvider } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { noteLeaseChange, stateNotedLeases } from '../leases/index.ts';
import { Dec, postHold, splitFee, topUpHold } from '../ledger/index.ts';
import { costOfSessionMinutes, minutesPaidFor } from '../pricing/index.ts';
import { EARNINGS_TRANSFER_CODE, nudgeAutoPayout } from '../wallets/index.ts';
import { countGpuMinutes } from './billing.ts';
import { billedFrom, endOf } from './clock.ts';
import { type BillingRecordRow, type EndKind, isRunning, loadSession, type SessionRow } from './session.ts';

/**
 * The end reasons billing gives itself: its renter's spend cap reached, funds run out, the provider side ending its
 * renter's session (`provider_ended`, whatever reason it gave), the provider's machine gone offline, into maintenance
 * or error, or removed. A party ending a session may not claim one (400, in any case or spacing): they say why the
 * platform ended it, and what counts against a provider's reliability.
 */
export const BILLING_END_REASONS = PLATFORM_END_REASONS;

export type { EndKind } from './session.ts';

/** How a session ended: its final row and billing record; `alreadyEnded` when it had ended before this call. */
export interface SessionEnd {
  session: SessionRow;
  billingRecord: BillingRecordRow;
  alreadyEnded: boolean;
}

/** Ends a session (or answers its existing end); returns the session and its billing record. */
export async function endSession(
  ctx: BillingContext,
  sessionId: string,
  kind: EndKind,
  correlationId?: string,
  /** Who ends it: a party of the session (its renter, the provider's owner or daemon) or an admin or service. */
  actor?: Principal,
): Promise<SessionEnd> {
  const end = await ctx.db.transaction().execute(async (trx) => {
    const session = await loadSession(trx, sessionId, true);
    if (actor) assertSessionParty(actor, session);
    // The provider side taking the machine back from its renter: that is why the session ended, whatever it says.
    if (actor && endsAsProvider(actor, session)) kind = { status: 'completed', reason: 'provider_ended' };
    if (!isRunning(session)) {
      return { session, billingRecord: await billingRecordOfSession(trx, sessionId), alreadyEnded: true };
    }
    const ended = await finishSession(ctx, trx, session, kind, correlationId);
    await stateNotedLeases(ctx, trx, correlationId);
    return ended;
  });
  afterSessionsEnded(ctx, [end], correlationId);
  return end;
}

/** What follows sessions' ends once committed (those that had ended before are left out). */
export function afterSessionsEnded(ctx: BillingContext, ends: readonly SessionEnd[], correlationId?: string): void {
  const ended = ends.filter((e) => !e.alreadyEnded);
  if (ended.length === 0) return;
  // The providers' earnings, committed: paid out now when a provider asked for automatic payouts.
  for (const end of ended) {
    if (new Dec(end.billingRecord.provider_earnings).gt(0)) {
      void nudgeAutoPayout(ctx, end.session.provider_wallet_id, correlationId);
    }
  }
  // Their GPUs are free, and a job one ran is settled (or placed again): the jobs round runs now.
  ctx.state.wakeJobs('capacity');
}

/**
 * Ends a running session inside the caller's transaction (its row locked). The caller ends its transaction with
 * `stateNotedLeases` (domain/leases): the machine's GPUs this end freed are stated to the market then.
 */
export async function finishSession(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  session: SessionRow,
  kind: EndKind,
  correlationId?: string,
): Promise<SessionEnd> {
  const now = ctx.now();
  const end = endOf(session, kind, now);
  const { endedAt } = end;
  let { minutes } = end;
  // A session with a spend cap costs at most the cap, billed exactly to it.
  const capped = (d: Dec) => (session.spend_cap === null ? d : Dec.min(d, new Dec(session.spend_cap)));
  let cost = capped(costOfSessionMinutes(session, minutes, ctx.scale));
  const cover = await topUpHold(trx, session, cost, { now, accountIds: ctx.state.accountIds });
  if (cover.short.gt(0)) {
    ctx.logger.warn(
      { session_id: session.id, cost: cost.toFixed(), covered: cover.held.toFixed() },
      'session cost exceeds what the renter can pay; capped at the hold',
    );
    minutes = Math.min(minutes, minutesPaidFor(session, cover.held, ctx.scale));
    cost = Dec.min(capped(costOfSessionMinutes(session, minutes, ctx.scale)), cover.held);
  }
  const { fee, rest } = splitFee(cost, new Dec(session.platform_fee_percent), ctx.scale);
  const paymentId = cost.gt(0) ? randomUUID() : null;
  const earningsId = rest.gt(0) ? randomUUID() : null;
  const reference = `session:${session.id}`;
  const base = { status: 'confirmed' as const, hold_id: session.hold_id, reference, confirmed_at: now };
  const records = [];
  if (paymentId) {
    records.push({
      ...base,
      id: paymentId,
      wallet_id: session.wallet_id,
      type: 'payment' as const,
      amount: cost.toFixed(),
      fee: fee.toFixed(),
    });
  }
  if (earningsId) {
    records.push({
      ...base,
      id: earningsId,
      wallet_id: session.provider_wallet_id,
      type: 'payment' as const,
      amount: rest.toFixed(),
      fee: '0',
    });
  }
  if (records.length > 0) await insertTransactions(trx, records);
  await postHold(
    trx,
    session.hold_id,
    [
      {
        to: { wallet: session.provider_wallet_id, kind: 'available' },
        amount: rest,
        code: EARNINGS_TRANSFER_CODE,
        transactionId: earningsId,
      },
      { to: { system: 'platform_fees' }, amount: fee, code: 'platform_fee', transactionId: paymentId },
    ],
    true,
    { now, accountIds: ctx.state.accountIds },
  );
  const reason = kind.reason ?? null;
  // The session's GPUs are free again for the next renter, in the transaction that ends it (stated to the market at
  // its end: the caller's `stateNotedLeases`).
  await releaseSessionGpus(trx, session.id);
  if (session.reserves_machine) noteLeaseChange(trx, session.provider_id);
  countGpuMinutes(ctx, session, minutes);
  const ended = await updateEndedSession(trx, session.id, {
    status: kind.status,
    ended_at: endedAt,
    end_reason: reason,
    billed_minutes: minutes,
    total_cost: cost.toFixed(),
    grace_until: null,
    updated_at: now,
  });
  const record: BillingRecordRow = await insertBillingRecord(trx, {
    id: randomUUID(),
    session_id: session.id,
    user_id: session.user_id,
    wallet_id: session.wallet_id,
    provider_id: session.provider_id,
    provider_wallet_id: session.provider_wallet_id,
    provider_owner_id: session.provider_owner_id,
    job_id: session.job_id,
    gpu_model: session.gpu_model,
    gpu_count: session.gpu_count,
    status: kind.status,
    end_reason: reason,
    total_hourly_rate: session.total_hourly_rate,
    billed_minutes: minutes,
    total_cost: cost.toFixed(),
    platform_fee: fee.toFixed(),
    provider_earnings: rest.toFixed(),
    payment_transaction_id: paymentId,
    spend_cap: session.spend_cap,
    started_at: billedFrom(session) ?? session.started_at,
    ended_at: endedAt,
    created_at: now,
  });
  await ctx.events.record(
    trx,
    { kind: `session.${kind.status}`, session: ended, billingRecord: record },
    correlationId,
  );
  // Its machine's daemon stops the workload at once rather than at its next poll.
  if (session.workload) {
    await ctx.events.record(
      trx,
      {
        kind: 'machine.sessions',
        providerId: session.provider_id,
        ownerId: session.provider_owner_id,
        sessionId: session.id,
        change: 'ended',
      },
      correlationId,
    );
  }
  return { session: ended, billingRecord: record, alreadyEnded: false };
}
