/**
 * How chain adapter failures become problem answers: a rejected deposit is a
 * refusal naming the reason (a kind and a DEPOSIT_* code), an unreachable RPC
 * node is SOLANA_UNAVAILABLE (kind `unavailable`).
 */
import { AppError, type ErrorKind, errors } from '@gpu/common';
import { billingErrors } from '../../errors.ts';
import { ChainRejection, ChainUnavailable, type DepositRejection } from './chain.ts';

const REJECTIONS: Record<DepositRejection, { kind: ErrorKind; code: string; what: string }> = {
  NOT_FOUND: { kind: 'not_found', code: 'DEPOSIT_TRANSACTION_NOT_FOUND', what: 'no such transaction on chain' },
  FAILED: { kind: 'unprocessable', code: 'DEPOSIT_TRANSACTION_FAILED', what: 'the transaction failed on chain' },
  NOT_FINAL: {
    kind: 'conflict',
    code: 'DEPOSIT_NOT_FINAL',
    what: 'the transaction has not reached the required commitment yet',
  },
  WRONG_MINT: { kind: 'unprocessable', code: 'DEPOSIT_WRONG_MINT', what: 'the transaction moved no platform tokens' },
  WRONG_RECIPIENT: {
    kind: 'unprocessable',
    code: 'DEPOSIT_WRONG_RECIPIENT',
    what: 'the tokens did not go to the platform treasury',
  },
  WRONG_SOURCE: {
    kind: 'unprocessable',
    code: 'DEPOSIT_WRONG_SOURCE',
    what: "the tokens did not come from the wallet's registered address",
  },
  AMOUNT_TOO_LOW: {
    kind: 'unprocessable',
    code: 'DEPOSIT_AMOUNT_TOO_LOW',
    what: 'the transaction moved less than the claimed amount',
  },
};

/** Maps a ChainRejection from deposit verification to its problem. */
function depositRejected(err: ChainRejection, signature: string): AppError {
  const r = REJECTIONS[err.reason] ?? {
    kind: 'unprocessable',
    code: 'DEPOSIT_REJECTED',
    what: 'the deposit was rejected',
  };
  return new AppError(r.kind, r.code, `${r.what}: ${err.message}`, {
    extra: { signature, reason: err.reason },
    headers: err.reason === 'NOT_FINAL' ? { 'retry-after': '5' } : {},
  });
}

/** Maps any error thrown by the chain adapter; AppErrors pass through. */
export function chainError(err: unknown, signature?: string): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof ChainRejection) return depositRejected(err, signature ?? '');
  if (err instanceof ChainUnavailable) return billingErrors.chainUnavailable(err);
  // The adapter refuses an amount the mint cannot represent before touching the chain.
  if (err instanceof RangeError) return errors.badRequest('INVALID_TRANSFER', err.message);
  return billingErrors.chainUnavailable(err);
}
