/**
 * Deposits: a client sends platform tokens from its wallet's registered
 * address to the treasury, then claims the transaction's signature. The
 * signature is verified on chain at the configured commitment and exactly the
 * verified amount is credited, once: the signature is UNIQUE across all
 * transaction records, so repeated or concurrent claims (to any wallet)
 * credit it a single time.
 */

import { randomUUID } from 'node:crypto';
import { isRefusal, type Principal } from '@gpu/common';
import {
  findBySignature,
  getTransaction,
  insertTransactions,
  type TransactionRow,
} from '../../db/transaction-repository.ts';
import { isUniqueViolation } from '../../db/unique-violation.ts';
import { billingErrors } from '../../errors.ts';
import { chainError } from '../chain/index.ts';
import type { BillingContext } from '../context.ts';
import type { KeyClaim } from '../idempotency.ts';
import { type Dec, parseAmount, postTransfers } from '../ledger/index.ts';
import { walletFor } from './wallets.ts';

const isSignatureTaken = (err: unknown) => isUniqueViolation(err, 'transactions_signature_unique');

/**
 * DEPOSIT_ALREADY_CREDITED when the signature was credited; it names the record only to the wallet it went to (a
 * deposit signature is public on chain: it must not tell anyone else which wallet holds it).
 */
async function alreadyCredited(ctx: BillingContext, signature: string, walletId: string) {
  const existing = await findBySignature(ctx.db, signature);
  if (!existing) return null;
  return existing.wallet_id === walletId
    ? billingErrors.depositAlreadyCredited(signature, existing.id, existing.wallet_id)
    : billingErrors.depositCreditedElsewhere(signature);
}

export interface DepositRequest {
  walletId: string;
  signature: string;
  /** Optional claimed amount: the transaction must have moved at least this much. */
  amount?: Dec;
  correlationId?: string;
  /** Who claims it: the wallet's holder (or an admin or service). */
  actor: Principal;
}

/** Verifies and credits a deposit; the confirmed deposit transaction. */
export async function claimDeposit(
  ctx: BillingContext,
  req: DepositRequest,
  idem: KeyClaim<TransactionRow> | null,
): Promise<TransactionRow> {
  const wallet = await walletFor(ctx, req.actor, req.walletId);
  if (!wallet.addressProvenAt || !wallet.solanaAddress) {
    throw billingErrors.addressNotProven(wallet.id, wallet.solanaAddress ?? 'an address');
  }
  const taken = await alreadyCredited(ctx, req.signature, req.walletId);
  if (taken) throw taken;
  if (!ctx.chain) throw billingErrors.chainNotConfigured();
  const chain = ctx.chain;
  let verified: Awaited<ReturnType<typeof chain.verifyDeposit>>;
  try {
    verified = await chain.verifyDeposit(req.signature, wallet.solanaAddress, req.amount?.toFixed());
  } catch (err) {
    const problem = chainError(err, req.signature);
    if (isRefusal(problem)) {
      await ctx.events.record(
        ctx.db,
        { kind: 'deposit.rejected', walletId: wallet.id, signature: req.signature, reason: problem.code },
        req.correlationId,
      );
    }
    throw problem;
  }
  const amount = parseAmount(verified.amount, ctx.scale);
  if (amount.isZero()) throw chainError(new Error('verified deposit of zero tokens'));
  const id = randomUUID();
  try {
    return await ctx.db.transaction().execute(async (trx) => {
      const now = ctx.now();
      await insertTransactions(trx, [
        {
          id,
          wallet_id: wallet.id,
          type: 'deposit',
          status: 'confirmed',
          amount: amount.toFixed(),
          signature: req.signature,
          destination: chain.treasuryAddress(),
          created_at: now,
          updated_at: now,
          confirmed_at: now,
        },
      ]);
      await postTransfers(
        trx,
        [
          {
            debit: { system: 'chain_incoming' },
            credit: { wallet: wallet.id, kind: 'available' },
            amount,
            code: 'deposit',
            transactionId: id,
          },
        ],
        ctx.state.accountIds,
      );
      const tx = (await getTransaction(trx, id))!;
      await idem?.claim(trx, id, tx);
      await ctx.events.record(
        trx,
        { kind: 'deposit.confirmed', transaction: tx, sourceOwner: verified.sourceOwner, slot: verified.slot },
        req.correlationId,
      );
      return tx;
    });
  } catch (err) {
    if (isSignatureTaken(err)) throw (await alreadyCredited(ctx, req.signature, req.walletId)) ?? err;
    throw err;
  }
}
