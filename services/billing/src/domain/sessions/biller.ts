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
import { claimSessionIn, sessionIdsIn } from '../../db/session-repository.ts';
import type { BillingContext } from '../context.ts';
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
  const result: CycleResult = { billed: 0, skipped: 0, terminated: 0, capped: 0, failed: 0 };
  let after = '00000000-0000-0000-0000-000000000000';
  for (;;) {
    const page = await sessionIdsIn(ctx.db, RUNNING_STATUSES, after, pageSize);
    for (const { id } of page) {
      try {
        const outcome = await ctx.db.transaction().execute(async (trx) => {
          const session = await claimSessionIn(trx, id, RUNNING_STATUSES);
          if (!session) return 'skipped' as const;
          const billed = await billElapsed(ctx, trx, session);
          if (!billed.end) return 'billed' as const;
          await finishSession(ctx, trx, billed.session, billed.end);
          return billed.end.status === 'terminated' ? ('terminated' as const) : ('capped' as const);
        });
        if (outcome === 'skipped') result.skipped++;
        else result.billed++;
        if (outcome === 'terminated') result.terminated++;
        if (outcome === 'capped') result.capped++;
      } catch (err) {
        result.failed++;
        ctx.logger.warn(
          { err: (err as Error).message, session_id: id },
          'billing a session failed; next cycle retries',
        );
      }
    }
    if (page.length < pageSize) return result;
    after = page.at(-1)!.id;
  }
}
