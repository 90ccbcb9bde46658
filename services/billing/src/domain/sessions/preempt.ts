/**
 * Taking an interruptible session's GPUs back (domain/leases/policy.ts chooses whose): inside the transaction of the
 * start that outbid it, under the machine's lease lock, each such session ends `preempted` at once. Billing ends at
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
 */
import { appendAudit, auditActor, type Principal } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { findSession, markPreemptedBy } from '../../db/session-repository.ts';
import type { BillingContext } from '../context.ts';
import { lockWalletAvailable } from '../ledger/index.ts';
import { finishSession, type SessionEnd } from './end.ts';
import { isRunning } from './session.ts';

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
