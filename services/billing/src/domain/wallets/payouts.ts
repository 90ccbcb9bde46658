/**
 * Withdrawals and provider payouts: tokens leave the treasury for a wallet's
 * owner. Crash-safe order:
 *  1. prepare and sign the transfer (its signature is known before sending);
 *  2. in one database transaction: debit `available` into the wallet's
 *     `pending_out` account and record the pending transaction WITH the
 *     signature and the signed bytes (the intent);
 *  3. send and confirm;
 *  4. settle: landed -> `pending_out` to `chain_outgoing`, `confirmed`;
 *     failed -> a reversing transfer back to `available`, `failed`.
 * A transfer that must create the destination's token account sends the amount less `billing.token_account_fee`
 * (the record's `fee`): the treasury pays that account's rent in SOL, which its owner can close and keep. On
 * landing, the fee goes from `pending_out` to `platform_fees` and the rest to `chain_outgoing`; a failed transfer
 * gives back the whole amount.
 * Before 1, nothing leaves while withdrawals and payouts are paused, nor a payout the treasury on chain cannot cover
 * together with everything else the ledger owes (domain/reserves/: 503 PAYOUTS_PAUSED, RESERVES_INSUFFICIENT); the
 * debit in 2 reads the pause again under a share lock.
 * A crash after 2 leaves a pending record that `reconcilePending` settles by
 * its signature (or re-sends, while its blockhash is still valid), so funds
 * are never lost nor sent twice. Settling is guarded by `status = 'pending'`,
 * so two instances can never settle one record twice.
 */
import { randomUUID } from 'node:crypto';
import type { Principal } from '@gpu/common';
import type { Transaction } from 'kysely';
import { transferIdOf } from '../../db/ledger-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import {
  getTransaction,
  insertTransactions,
  settlePending,
  type TransactionRow,
} from '../../db/transaction-repository.ts';
import { billingErrors } from '../../errors.ts';
import { assertMayPayTo } from '../access.ts';
import type { PreparedTransfer, SignatureState, SignedTransfer } from '../chain/index.ts';
import { chainError, landedAt } from '../chain/index.ts';
import type { BillingContext } from '../context.ts';
import type { KeyClaim } from '../idempotency.ts';
import { Dec, postTransfers, walletBalances } from '../ledger/index.ts';
import { assertPayoutsOpen, assertPayoutsOpenNow, assertReservesCover } from '../reserves/index.ts';
import type { Wallet } from './wallets.ts';
import { checkWithdrawalLimit, countWithdrawal } from './withdrawal-limit.ts';

type ChainPayoutType = 'withdrawal' | 'payout';

export interface ChainPayoutRequest {
  wallet: Wallet;
  type: ChainPayoutType;
  amount: Dec;
  /** Destination owner address; the wallet's registered address by default. */
  destination?: string;
  correlationId?: string;
  /** Who asks (anyone but the holder pays only the wallet's own address); absent for the service's own work. */
  actor?: Principal;
  /**
   * Checked inside the debit's transaction, before the debit (it may lock rows): throwing stops the payout with
   * nothing debited or sent. An automatic payout checks there that its address is still the wallet's setting.
   */
  guard?: (trx: Transaction<BillingDB>) => Promise<void>;
  /**
   * Run last in the debit's transaction, with the pending record: what it writes commits with the debit or not at all.
   * An automatic payout appends its `requested` audit event there.
   */
  debited?: (trx: Transaction<BillingDB>, pending: TransactionRow) => Promise<void>;
}

/** Whether a signature state meets the configured commitment. */
export const hasLanded = (ctx: BillingContext, state: SignatureState) => landedAt(ctx.commitment, state);

/**
 * Debits, sends and settles; the record as it stands afterwards: `confirmed`, `pending` (sent, not yet confirmed:
 * reconciliation settles it) or `failed` (the debit was reversed).
 */
export async function startChainPayout(
  ctx: BillingContext,
  req: ChainPayoutRequest,
  idem: KeyClaim<TransactionRow> | null,
): Promise<TransactionRow> {
  const { wallet, amount } = req;
  const destination = req.destination ?? wallet.solanaAddress;
  if (!destination) throw billingErrors.destinationRequired(wallet.id);
  // Only the holder names another destination: an admin's or a service's token (leaked, or misused) pays no one else.
  if (req.actor) assertMayPayTo(req.actor, wallet, destination);
  if (!ctx.chain) throw billingErrors.chainNotConfigured();
  // A wallet past its withdrawals of the hour asks the chain for nothing (the debit counts them, below).
  if (req.type === 'withdrawal') await checkWithdrawalLimit(ctx.withdrawalLimit, ctx.db, wallet.id, ctx.now());
  // Cheap early refusal before asking the RPC node to build a transaction; the locked check below decides.
  const balances = await walletBalances(ctx.db, wallet.id, ctx.scale);
  if (!balances || new Dec(balances.available).lt(amount)) {
    throw billingErrors.insufficientFunds(wallet.id, balances?.available ?? '0', amount.toFixed(ctx.scale));
  }
  // Nothing leaves while payouts are paused, nor a payout the treasury cannot cover with all else the ledger owes.
  await assertPayoutsOpenNow(ctx);
  await assertReservesCover(ctx);
  let prepared: PreparedTransfer;
  try {
    // Tokens sent to a program, the system address or a token account (rather than its owner) are stranded.
    const problem = await ctx.chain.destinationProblem(destination);
    if (problem) throw billingErrors.unfitDestination(destination, problem);
    prepared = await ctx.chain.prepareTransfer(destination, amount.toFixed(), { accountFee: ctx.tokenAccountFee });
  } catch (err) {
    throw chainError(err);
  }
  const row = await recordIntent(ctx, { ...req, destination }, prepared, idem);
  return sendAndSettle(ctx, row, prepared, req.correlationId);
}

/**
 * Step 2: in one database transaction, debits `available` into `pending_out`
 * and records the pending transaction with its signature and signed bytes
 * (and claims the idempotency key). INSUFFICIENT_FUNDS when the funds are not available.
 */
export async function recordIntent(
  ctx: BillingContext,
  req: ChainPayoutRequest & { destination: string },
  prepared: PreparedTransfer,
  idem: KeyClaim<TransactionRow> | null,
): Promise<TransactionRow> {
  const { wallet, amount, destination } = req;
  const fee = amount.minus(prepared.sent);
  if (fee.isNegative() || fee.gte(amount)) {
    throw new RangeError(`a transfer of ${amount.toFixed()} that sends ${prepared.sent} withholds no sound fee`);
  }
  const id = randomUUID();
  return ctx.db.transaction().execute(async (trx) => {
    // A pause committed since the check above wins: no debit after it.
    await assertPayoutsOpen(trx);
    await req.guard?.(trx);
    const now = ctx.now();
    if (req.type === 'withdrawal') await countWithdrawal(ctx.withdrawalLimit, trx, wallet.id, now);
    await postTransfers(
      trx,
      [
        {
          debit: { wallet: wallet.id, kind: 'available' },
          credit: { wallet: wallet.id, kind: 'pending_out' },
          amount,
          code: req.type,
          transactionId: id,
        },
      ],
      ctx.state.accountIds,
    );
    await insertTransactions(trx, [
      {
        id,
        wallet_id: wallet.id,
        type: req.type,
        status: 'pending',
        amount: amount.toFixed(),
        fee: fee.toFixed(),
        signature: prepared.signature,
        destination,
        serialized_tx: prepared.serialized,
        last_valid_block_height: prepared.lastValidBlockHeight,
        created_at: now,
        updated_at: now,
      },
    ]);
    await idem?.claim(trx, id);
    const pending = (await getTransaction(trx, id))!;
    await ctx.events.record(trx, { kind: `${req.type}.pending`, transaction: pending }, req.correlationId);
    await req.debited?.(trx, pending);
    return pending;
  });
}

/** Sends (or re-sends) a prepared transfer and settles the record from the outcome. */
export async function sendAndSettle(
  ctx: BillingContext,
  row: TransactionRow,
  prepared: SignedTransfer,
  correlationId?: string,
): Promise<TransactionRow> {
  let state: SignatureState;
  try {
    state = await ctx.chain!.sendAndConfirm(prepared);
  } catch (err) {
    // Unknown whether it reached the chain: leave it pending for reconciliation, which decides by signature.
    ctx.logger.warn({ err: (err as Error).message, transaction_id: row.id }, 'send failed; left pending');
    return row;
  }
  if (hasLanded(ctx, state)) return settle(ctx, row.id, 'confirmed', null, correlationId);
  if (state === 'failed') return settle(ctx, row.id, 'failed', 'transaction failed on chain', correlationId);
  return row;
}

/**
 * Settles a pending withdrawal or payout once: `confirmed` moves what was sent to `chain_outgoing` and the record's
 * token account fee to `platform_fees`; `failed` reverses the whole debit with a new transfer. Returns the record as
 * it stands afterwards (unchanged when already settled).
 */
export async function settle(
  ctx: BillingContext,
  transactionId: string,
  outcome: 'confirmed' | 'failed',
  reason: string | null,
  correlationId?: string,
): Promise<TransactionRow> {
  return ctx.db.transaction().execute(async (trx) => {
    const now = ctx.now();
    const row = await settlePending(trx, transactionId, outcome, reason, now);
    if (!row) return (await getTransaction(trx, transactionId))!;
    const debitId = await transferIdOf(trx, transactionId, row.type);
    const pendingOut = { wallet: row.wallet_id, kind: 'pending_out' } as const;
    const fee = new Dec(row.fee);
    await postTransfers(
      trx,
      outcome === 'confirmed'
        ? [
            {
              debit: pendingOut,
              credit: { system: 'chain_outgoing' },
              amount: new Dec(row.amount).minus(fee),
              code: `${row.type}_settlement`,
              transactionId,
            },
            ...(fee.gt(0)
              ? [
                  {
                    debit: pendingOut,
                    credit: { system: 'platform_fees' as const },
                    amount: fee,
                    code: `${row.type}_token_account_fee`,
                    transactionId,
                  },
                ]
              : []),
          ]
        : [
            {
              debit: pendingOut,
              credit: { wallet: row.wallet_id, kind: 'available' },
              amount: new Dec(row.amount),
              code: `${row.type}_reversal`,
              transactionId,
              reversesTransferId: debitId,
            },
          ],
      ctx.state.accountIds,
    );
    await ctx.events.record(
      trx,
      { kind: `${row.type as ChainPayoutType}.${outcome}`, transaction: row },
      correlationId,
    );
    return row;
  });
}
