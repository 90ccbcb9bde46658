/** Turning a request's amount string into an exact amount at the token's scale. */
import { AmountFormatError, type Dec, parseAmount } from '../domain/ledger/index.ts';
import { billingErrors } from '../errors.ts';

/** Parses a positive amount; 400 with the field path when it is malformed, zero or too precise. */
export function requestAmount(value: string, scale: number, path = 'body.amount'): Dec {
  let amount: Dec;
  try {
    amount = parseAmount(value, scale);
  } catch (err) {
    if (err instanceof AmountFormatError) throw billingErrors.invalidAmount(err.message, path);
    throw err;
  }
  if (amount.isZero()) throw billingErrors.invalidAmount('the amount must be greater than zero', path);
  return amount;
}
