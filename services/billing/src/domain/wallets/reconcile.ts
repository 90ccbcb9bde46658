/**
 * Reconciliation of pending withdrawals and payouts with the chain, by their
 * recorded signatures: run at start-up (after a crash between debit and
 * settlement) and periodically.
 *  - landed at the configured commitment -> confirmed;
 *  - failed, or unknown with an expired blockhash (it can never land) ->
 *    reversed and failed;
 *  - unknown with a still-valid blockhash -> the stored signed bytes are
 *    re-sent (the same signature: it can land at most once);
 *  - seen but below the commitment -> left for the next round.
 * A payout that fails here backs its wallet's automatic payout off (auto-payout.ts), as one that failed at once does.
 */
import { pendingChainPayouts, type TransactionRow } from '../../db/transaction-repository.ts';
import type { BillingContext } from '../context.ts';
import { backOffAfterFailedPayout } from './auto-payout.ts';
import { hasLanded, sendAndSettle, settle } from './payouts.ts';

export interface ReconcileSummary {
  checked: number;
  confirmed: number;
  failed: number;
  resent: number;
  waiting: number;
}

/** Settles what it can of the pending chain payouts older than `minAgeMs`. */
export async function reconcilePending(ctx: BillingContext, minAgeMs = 0): Promise<ReconcileSummary> {
  const summary: ReconcileSummary = { checked: 0, confirmed: 0, failed: 0, resent: 0, waiting: 0 };
  const chain = ctx.chain;
  if (!chain) return summary;
  const rows = await pendingChainPayouts(ctx.db, new Date(ctx.now().getTime() - minAgeMs), 500);
  // A payout that fails here failed after its request ended: its wallet's automatic payout backs off as it would
  // had the failure been seen at once.
  const failed = async (row: TransactionRow, reason: string) => {
    const after = await settle(ctx, row.id, 'failed', reason);
    if (after.status === 'failed' && row.type === 'payout') await backOffAfterFailedPayout(ctx, row.wallet_id, reason);
    summary.failed++;
  };
  for (const row of rows) {
    summary.checked++;
    if (!row.signature || !row.serialized_tx || row.last_valid_block_height === null) {
      await failed(row, 'no signed transaction was recorded');
      continue;
    }
    const { state, expired } = await chain.signatureState(row.signature, Number(row.last_valid_block_height));
    if (hasLanded(ctx, state)) {
      await settle(ctx, row.id, 'confirmed', null);
      summary.confirmed++;
    } else if (state === 'failed') {
      await failed(row, 'transaction failed on chain');
    } else if (state === 'unknown' && expired) {
      await failed(row, 'transaction expired without landing');
    } else if (state === 'unknown') {
      const after = await sendAndSettle(ctx, row, {
        signature: row.signature,
        serialized: row.serialized_tx,
        lastValidBlockHeight: Number(row.last_valid_block_height),
      });
      summary.resent++;
      if (after.status === 'confirmed') summary.confirmed++;
      else if (after.status === 'failed') {
        summary.failed++;
        if (row.type === 'payout') await backOffAfterFailedPayout(ctx, row.wallet_id, after.failure_reason ?? 'failed');
      } else summary.waiting++;
    } else {
      summary.waiting++;
    }
  }
  if (summary.checked > 0) ctx.logger.info(summary, 'reconciled pending withdrawals and payouts');
  return summary;
}
