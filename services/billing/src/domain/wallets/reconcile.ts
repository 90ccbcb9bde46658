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
 */
import { pendingChainPayouts } from '../../db/transaction-repository.ts';
import type { BillingContext } from '../context.ts';
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
  for (const row of rows) {
    summary.checked++;
    if (!row.signature || !row.serialized_tx || row.last_valid_block_height === null) {
      await settle(ctx, row.id, 'failed', 'no signed transaction was recorded');
      summary.failed++;
      continue;
    }
    const { state, expired } = await chain.signatureState(row.signature, Number(row.last_valid_block_height));
    if (hasLanded(ctx, state)) {
      await settle(ctx, row.id, 'confirmed', null);
      summary.confirmed++;
    } else if (state === 'failed') {
      await settle(ctx, row.id, 'failed', 'transaction failed on chain');
      summary.failed++;
    } else if (state === 'unknown' && expired) {
      await settle(ctx, row.id, 'failed', 'transaction expired without landing');
      summary.failed++;
    } else if (state === 'unknown') {
      const after = await sendAndSettle(ctx, row, {
        signature: row.signature,
        serialized: row.serialized_tx,
        lastValidBlockHeight: Number(row.last_valid_block_height),
      });
      summary.resent++;
      if (after.status === 'confirmed') summary.confirmed++;
      else if (after.status === 'failed') summary.failed++;
      else summary.waiting++;
    } else {
      summary.waiting++;
    }
  }
  if (summary.checked > 0) ctx.logger.info(summary, 'reconciled pending withdrawals and payouts');
  return summary;
}
