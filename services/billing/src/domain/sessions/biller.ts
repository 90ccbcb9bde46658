/**
 * The background biller: every `billing_interval` it bills each running
 * session's elapsed full minutes, keeps holds ahead, moves sessions into and
 * out of grace, terminates those whose grace is over and ends those whose
 * cost reached their spend cap, also when no usage update arrives (a silent
 * daemon must not mean free GPU time, nor run past its renter's cap).
 *
 * Several billing instances may run it at once: each session is billed in its
 * own transaction, claimed with SELECT … FOR UPDATE SKIP LOCKED, so a session
 * another instance (or a usage update) is billing right now is skipped, never
 * waited for or billed twice; billing is by absolute elapsed minutes, so the
 * next cycle catches up anything skipped.
 */
import { claimSessionIn, sessionIdsIn, sessionIdsPastCap } from '../../db/session-repository.ts';
import type { BillingContext } from '../context.ts';
import { stateNotedLeases } from '../leases/index.ts';
import { billElapsed } from './billing.ts';
import { finishSession } from './end.ts';
import { RUNNING_STATUSES } from './session.ts';

export interface CycleResult {
  /** Sessions this instance billed. */
  billed: number;
  /** Sessions skipped because someone else held them. */
  skipped: number;
  /** Sessions ended for want of funds (grace over). */
  terminated: number;
  /** Sessions ended at their spend cap. */
  capped: number;
  failed: number;
}

/** Runs one billing cycle over every running session (in pages of `pageSize`). */
export async function runBillingCycle(ctx: BillingContext, pageSize = 500): Promise<CycleResult> {
  const result = emptyResult();
  let after = '00000000-0000-0000-0000-000000000000';
  for (;;) {
    const page = await sessionIdsIn(ctx.db, RUNNING_STATUSES, after, pageSize);
    for (const { id } of page) await billOne(ctx, id, result);
    if (page.length < pageSize) return result;
    after = page.at(-1)!.id;
  }
}

/**
 * The cap sweep (every `billing.spend_cap_check_interval`, 5 s by default): bills and ends the running sessions whose
 * cap's time is over (`cap_ends_at` passed), so that a capped session holds its GPUs at most that long past the time
 * its cap paid for, not until the next billing cycle. Found through an index of capped running sessions.
 */
export async function endSessionsAtCap(ctx: BillingContext, pageSize = 500): Promise<CycleResult> {
  const result = emptyResult();
  const now = ctx.now();
  let after: { capEndsAt: Date; id: string } | undefined;
  for (;;) {
    const due = await sessionIdsPastCap(ctx.db, now, after, pageSize);
    for (const { id } of due) await billOne(ctx, id, result);
    if (due.length < pageSize) return result;
    const last = due.at(-1)!;
    after = { capEndsAt: last.cap_ends_at, id: last.id };
  }
}

const emptyResult = (): CycleResult => ({ billed: 0, skipped: 0, terminated: 0, capped: 0, failed: 0 });

/** Bills one running session in its own transaction (skipped when another holds it), ending it when billing says so. */
async function billOne(ctx: BillingContext, id: string, result: CycleResult): Promise<void> {
  try {
    const outcome = await ctx.db.transaction().execute(async (trx) => {
      const session = await claimSessionIn(trx, id, RUNNING_STATUSES);
      if (!session) return 'skipped' as const;
      const billed = await billElapsed(ctx, trx, session);
      if (!billed.end) return 'billed' as const;
      await finishSession(ctx, trx, billed.session, billed.end);
      await stateNotedLeases(ctx, trx);
      return billed.end.status === 'terminated' ? ('terminated' as const) : ('capped' as const);
    });
    if (outcome === 'skipped') result.skipped++;
    else result.billed++;
    if (outcome === 'terminated') result.terminated++;
    if (outcome === 'capped') result.capped++;
  } catch (err) {
    result.failed++;
    ctx.logger.warn({ err: (err as Error).message, session_id: id }, 'billing a session failed; next cycle retries');
  }
}
