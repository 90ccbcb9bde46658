/**
 * What billing's relay asks the auth service (domain/reach/), with billing's own machine client (a `service` client,
 * the one of `provider_registry`), through the platform's typed client:
 * - a user's SSH public keys, as renters' `ssh` into their workloads checks them (`GET /users/{userId}/ssh-keys`),
 *   read afresh for every connection: a key the user removed lets no new connection in;
 * - whether the credentials behind open streams still hold (`POST /credentials/live`, in one batch): a revoked API
 *   key or a sign-out ends its streams.
 */
import { authClient } from '@gpu/client';
import { AppError, durationMs } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import type { StreamCredential } from '../domain/reach/index.ts';
import { configuredTokens } from './provider-registry.ts';

/** The user's public keys (OpenSSH lines), or none. */
export type SshKeysOf = (userId: string, correlationId?: string) => Promise<string[]>;

/** Whether each credential still holds. */
type CredentialsLive = (credentials: StreamCredential[]) => Promise<boolean[]>;

const unavailable = (detail: string, cause?: unknown) =>
  new AppError('unavailable', 'REACH_UNAVAILABLE', detail, { cause, headers: { 'retry-after': '5' } });

/** The configured auth service's answers; null without one (`provider_registry.auth_url`). */
export function configuredAuthService(
  config: BillingConfig['provider_registry'],
): { sshKeys: SshKeysOf; credentialsLive: CredentialsLive } | null {
  if (!config.auth_url) return null;
  const client = authClient({
    baseUrl: config.auth_url,
    token: configuredTokens(config),
    timeoutMs: durationMs(config.timeout),
    retries: 2,
  });
  const failed = (what: string, result: { response: Response; error?: unknown }) => {
    const problem = (result.error ?? {}) as { code?: string };
    return unavailable(`the auth service answered ${result.response.status} ${problem.code ?? ''} for ${what}`.trim());
  };
  return {
    async sshKeys(userId, correlationId) {
      const result = await client
        .GET('/api/v1/auth/users/{userId}/ssh-keys', {
          params: { path: { userId }, query: { limit: 100 } },
          headers: correlationId ? { 'x-correlation-id': correlationId } : {},
        })
        .catch((err: unknown) => {
          throw unavailable(`the auth service, which holds SSH keys, is unreachable: ${(err as Error).message}`, err);
        });
      if (result.response.status === 404) return [];
      if (!result.data) throw failed('SSH keys', result);
      return result.data.map((k) => k.public_key);
    },
    async credentialsLive(credentials) {
      const live: boolean[] = [];
      // The route takes at most 1,000 at once.
      for (let i = 0; i < credentials.length; i += 1000) {
        const batch = credentials.slice(i, i + 1000).map((c) => ({
          user_id: c.userId,
          ...(c.keyId ? { key_id: c.keyId } : c.signInId ? { sign_in_id: c.signInId } : {}),
        }));
        const result = await client.POST('/api/v1/auth/credentials/live', { body: { credentials: batch } });
        if (!result.data) throw failed('credentials', result);
        live.push(...result.data.live);
      }
      return live;
    },
  };
}
