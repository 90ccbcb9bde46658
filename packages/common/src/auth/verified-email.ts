/**
 * Actions a user may take only once they verified their e-mail address: each service's
 * `access.require_verified_email` (env `REQUIRE_VERIFIED_EMAIL`) names them, `withdrawals,payouts` by default. A
 * route says which action it is (`config.verifiedEmail`); the access check refuses a user's token without the
 * `email_verified` claim (403 EMAIL_NOT_VERIFIED). Machine clients have no address and are never refused; an
 * unchecked setup (access control off) neither.
 *
 * - `withdrawals`: tokens out of a wallet to an address (billing).
 * - `payouts`: a provider's payout destination and payouts on demand (billing).
 * - `sessions`: starting a rental (billing).
 * - `api_keys`: creating an API key (auth).
 */
import { AppError } from '../errors.ts';
import type { Principal } from './principal.ts';

export const VERIFIED_EMAIL_ACTIONS = ['withdrawals', 'payouts', 'sessions', 'api_keys'] as const;
export type VerifiedEmailAction = (typeof VERIFIED_EMAIL_ACTIONS)[number];

/** 403 EMAIL_NOT_VERIFIED for a user whose token does not say their address is verified. */
export function assertVerifiedEmail(principal: Principal, action: VerifiedEmailAction): void {
  if (principal.kind !== 'user' || principal.unchecked || principal.emailVerified === true) return;
  throw new AppError(
    'forbidden',
    'EMAIL_NOT_VERIFIED',
    `${action.replace('_', ' ')} need a verified e-mail address: verify yours (POST /api/v1/auth/email/verification ` +
      'mails you a code), then sign in again or refresh your token',
    { extra: { action } },
  );
}
