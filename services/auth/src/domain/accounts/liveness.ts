/**
 * Whether a credential an access token names is still live: one rule for this service's own tokens
 * (`withLiveCredentials`) and for the platform's services that ask about tokens they verified by signature
 * (`credentialsLive`, billing for the streams it relays).
 *
 * - An API key's (`key_id`): live while the key exists, is that user's, is not revoked and was made in the account's
 *   current epoch (epochs.ts).
 * - A sign-in's (`sid`): live while one of its refresh tokens is not revoked and it began in the current epoch: signing
 *   out, a password changed elsewhere and a fresh start end it.
 * - A user's token that names neither: live while the user exists.
 * - A user who does not exist has no live credential.
 *
 * A machine client's token is not asked about: its client's secret, not a credential of a user, made it.
 */
import {
  type AccessTokenClaims,
  type AppError,
  errors,
  isPrivileged,
  type Principal,
  type TokenVerifier,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import { type CredentialFacts, type CredentialRef, credentialFacts } from '../../db/credential-repository.ts';
import type { AuthDatabase } from '../../db/schema.ts';
import { authErrors } from '../../errors.ts';
import type { AuthContext } from '../context.ts';

export type { CredentialRef } from '../../db/credential-repository.ts';

/** How many credentials one question names at most (`credentialsLive`). */
export const MAX_CREDENTIALS_PER_CHECK = 1000;

/**
 * Why a credential is no longer live: its key revoked (or of an earlier epoch), a key that is not its user's (none
 * such, or another user's), its sign-in ended (or none such of its user), its user gone.
 */
export const CREDENTIAL_ENDS = ['revoked', 'unknown_key', 'signed_out', 'user_gone'] as const;
export type CredentialEnd = (typeof CREDENTIAL_ENDS)[number];

/** The rule, for one credential and what the database holds about it: null while it is live. */
function endOf(credential: CredentialRef, facts: CredentialFacts): CredentialEnd | null {
  if (!facts.user_exists) return 'user_gone';
  if (credential.keyId !== undefined) {
    if (facts.key_user_id !== credential.userId) return 'unknown_key';
    return facts.key_revoked || !facts.key_current ? 'revoked' : null;
  }
  if (credential.signInId !== undefined) return facts.sign_in_alive ? null : 'signed_out';
  return null;
}

/** Each credential's end (null: live), in the order given, in one query. */
async function credentialEnds(
  db: Kysely<AuthDatabase>,
  credentials: readonly CredentialRef[],
): Promise<(CredentialEnd | null)[]> {
  const facts = await credentialFacts(db, credentials);
  return credentials.map((credential, i) => endOf(credential, facts[i] as CredentialFacts));
}

/** For the platform's services (and admins): which of the credentials behind their open streams are still live. */
export async function credentialsLive(
  ctx: Pick<AuthContext, 'db'>,
  actor: Principal,
  credentials: readonly CredentialRef[],
): Promise<(CredentialEnd | null)[]> {
  if (!isPrivileged(actor)) {
    throw errors.forbidden(
      "only platform services and admins ask whether users' credentials are live",
      'ROLE_REQUIRED',
    );
  }
  return credentialEnds(ctx.db, credentials);
}

/** This service's answer to a token whose credential ended. */
const REFUSALS: Record<CredentialEnd, () => AppError> = {
  revoked: authErrors.revokedKeyToken,
  // A token signed by this service names its own user's key: the key's user is gone.
  unknown_key: authErrors.userGone,
  signed_out: authErrors.signInEnded,
  user_gone: authErrors.userGone,
};

/** Refuses (401) a verified token whose credential this service sees withdrawn; machine clients' pass as they are. */
async function assertLive(ctx: Pick<AuthContext, 'db'>, claims: AccessTokenClaims): Promise<void> {
  if (claims.client_id !== undefined) return;
  // An API key's token is judged by its key (a token never names a key and a sign-in both).
  const credential: CredentialRef =
    claims.key_id !== undefined
      ? { userId: claims.sub, keyId: claims.key_id }
      : claims.sid !== undefined
        ? { userId: claims.sub, signInId: claims.sid }
        : { userId: claims.sub };
  const [end] = await credentialEnds(ctx.db, [credential]);
  if (end) throw REFUSALS[end]();
}

/** This service's verifier: the signature and claims as every service checks them, then the credential's life. */
export function withLiveCredentials(ctx: Pick<AuthContext, 'db'>, verifier: TokenVerifier): TokenVerifier {
  return {
    async verify(token, at) {
      const claims = await verifier.verify(token, at);
      await assertLive(ctx, claims);
      return claims;
    },
  };
}
