/**
 * Group commit of ledger transfers. A caller that posts a group of transfers on
 * its own (not with other rows in its own transaction) submits it here; while
 * one batch is in the database, new groups queue, and when it returns everything
 * queued (up to 256 groups) goes out as the next batch: one `ledger_post_groups`
 * statement, one commit, however many groups (migration 0008).
 *
 * Each group keeps the meaning of one `postTransfers` call: it is all or
 * nothing, refused with INSUFFICIENT_FUNDS naming the wallet when it would
 * overdraw one, and it sees the groups submitted before it (in submission
 * order, also within a batch: a group covered only by an earlier group's
 * credit posts). A refused group leaves the rest of its batch alone. Should the
 * statement itself fail (the connection lost, say), every group of the batch
 * fails with that error and nothing of the batch is written; a deadlock or
 * serialization failure, after which nothing was written, is tried again.
 */
import { GroupCommit, type GroupCommitStats, withRetry } from '@gpu/common';
import { postLedgerGroups, type TransferRow } from '../db/ledger-repository.ts';
import type { BillingContext } from './context.ts';
import {
  insufficientFunds,
  type PostedTransfer,
  postedTransfers,
  refusedAmounts,
  type TransferSpec,
  transferRows,
} from './ledger.ts';

/** Most groups in one statement. */
const MAX_BATCH = 256;

/** What group commit needs of a billing context: its database and its state (the batcher lives there). */
export type LedgerContext = Pick<BillingContext, 'db' | 'state'>;

/** The transfer batcher of a context, made on first use. */
function batcher(ctx: LedgerContext): GroupCommit<TransferRow[], null> {
  ctx.state.transferBatcher ??= new GroupCommit((groups) => postBatch(ctx, groups), {
    maxBatch: MAX_BATCH,
    // One batch in the database at a time: the next one gathers everything that arrives meanwhile, and groups
    // are applied in the order they were submitted.
    maxInFlight: 1,
  });
  return ctx.state.transferBatcher;
}

/**
 * Posts a group of transfers atomically, on its own, in one statement and one commit with the groups that
 * arrive at the same time. Refusals are those of `postTransfers` (INSUFFICIENT_FUNDS naming the wallet,
 * WALLET_NOT_FOUND), for this group alone. Not for transfers that must commit with other rows: those go through
 * `postTransfers` in the caller's transaction.
 */
export async function postTransferGroup(ctx: LedgerContext, specs: TransferSpec[]): Promise<PostedTransfer[]> {
  if (specs.length === 0) return [];
  const rows = await transferRows(ctx.db, specs, ctx.state.accountIds);
  // The database refuses a transfer from an account to itself for the whole statement; refuse it here, so that
  // it fails this group alone.
  for (const r of rows) {
    if (r.debit_account_id === r.credit_account_id) throw new Error(`transfer to its own account: ${r.code}`);
  }
  await batcher(ctx).submit(rows);
  return postedTransfers(rows);
}

/** Batches and groups this context's transfer batcher has sent so far (zeros before the first). */
export function transferGroupStats(ctx: LedgerContext): GroupCommitStats {
  return ctx.state.transferBatcher?.stats ?? { batches: 0, items: 0, largestBatch: 0 };
}

/** Posts a batch of groups in one statement: null for a posted group, the error of a refused one. */
async function postBatch(ctx: LedgerContext, groups: TransferRow[][]): Promise<(null | Error)[]> {
  const refused = await withRetry(() => postLedgerGroups(ctx.db, groups), { attempts: 3, retryable: isLockConflict });
  const results: (null | Error)[] = groups.map(() => null);
  for (const r of refused) {
    results[r.group_index] = r.refusal === 'BL402' ? insufficientFunds(r) : refusedAmounts(r.message);
  }
  return results;
}

/** A deadlock or serialization failure: the statement was rolled back, so trying again cannot post twice. */
function isLockConflict(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return code === '40P01' || code === '40001';
}
