/**
 * The storage service as billing's `WorkloadStorage`: `POST /grants` with billing's own machine token (the client of
 * `provider_registry`: one identity of billing at the auth service), through the platform's typed client. Storage's
 * refusals (403 someone else's object, 404 a missing one, 400 a bad key) reach the caller as they are, their code
 * kept; an unreachable or failing storage service is a 503 STORAGE_UNAVAILABLE, never a hang or a 500.
 */
import { lazyClientCredentials, storageClient, type TokenSource } from '@gpu/client';
import { AppError, durationMs, type ErrorKind } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import type { WorkloadStorage } from '../domain/workload-storage.ts';
import { billingErrors } from '../errors.ts';

/** Storage's refusals that mean the request, not storage, is wrong: passed on as they are. */
const REFUSALS: Record<number, ErrorKind> = { 400: 'invalid', 403: 'forbidden', 404: 'not_found' };

function storageGrants(opts: { url: string; token: TokenSource; timeoutMs: number }): WorkloadStorage {
  const client = storageClient({ baseUrl: opts.url, token: opts.token, timeoutMs: opts.timeoutMs, retries: 2 });
  return {
    async grant(request, correlationId) {
      const result = await client
        .POST('/grants', {
          body: {
            user_id: request.userId,
            read: request.read,
            write: request.write,
            expiry: `${request.expirySeconds}s`,
          },
          headers: correlationId ? { 'x-correlation-id': correlationId } : {},
        })
        .catch((err: unknown) => {
          throw billingErrors.storageUnavailable(`the storage service is unreachable: ${(err as Error).message}`, err);
        });
      const status = result.response.status;
      if (!result.data) {
        const problem = (result.error ?? {}) as {
          code?: string;
          detail?: string;
          errors?: { path: string; message: string }[];
        };
        const kind = REFUSALS[status];
        const detail = `storage: ${problem.detail ?? `answered ${status}`}`;
        // Its field errors too (`body.write.2.key`): the domain names the caller's own field from them.
        if (kind && problem.code) throw new AppError(kind, problem.code, detail, { errors: problem.errors });
        throw billingErrors.storageUnavailable(
          `the storage service answered ${status} ${problem.code ?? ''}: ${detail}`,
        );
      }
      return {
        read: result.data.read,
        write: result.data.write,
        expiresAt: new Date(result.data.expires_at),
      };
    },
  };
}

/** The storage service configured in `storage`, or null when its URL is empty. */
export function configuredStorage(config: BillingConfig, token?: TokenSource): WorkloadStorage | null {
  if (!config.storage.url) return null;
  const machine = config.provider_registry;
  const source =
    token ??
    lazyClientCredentials({
      authUrl: machine.auth_url,
      clientId: machine.client_id || undefined,
      clientSecret: machine.client_secret || undefined,
      credentialsFile: machine.credentials_file || undefined,
    });
  return storageGrants({ url: config.storage.url, token: source, timeoutMs: durationMs(config.storage.timeout) });
}
