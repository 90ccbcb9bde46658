/**
 * Billing as the meter's `UsageSink`: `POST /api/v1/billing/storage-usage` with the storage service's machine token
 * (client credentials at the auth service), through the platform's typed client (a time limit per attempt, bounded
 * retries). An answer that a retry cannot change (400, 403, 404, 409: a period overlapping another) is logged and
 * counts as delivered; a network failure or a 5xx throws, so the meter tries again at the next period.
 */
import { billingClient, lazyClientCredentials, type TokenSource } from '@gpu/client';
import { durationMs, type Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import type { StorageUsage, UsageSink } from '../domain/metering.ts';

const FINAL = new Set([400, 403, 404, 409]);

/** The sink for `metering`'s billing, or null when metering is off (no `billing_url`, or a zero interval). */
export function billingUsageSink(
  settings: StorageConfig['metering'],
  logger: Logger,
  token?: TokenSource,
): UsageSink | null {
  if (!settings.billing_url || durationMs(settings.interval) <= 0) return null;
  const client = billingClient({
    baseUrl: settings.billing_url,
    token:
      token ??
      lazyClientCredentials({
        authUrl: settings.auth_url,
        clientId: settings.client_id,
        clientSecret: settings.client_secret,
        credentialsFile: settings.credentials_file,
      }),
    timeoutMs: durationMs(settings.timeout),
    retries: 2,
  });
  return {
    async report(usage: StorageUsage) {
      const { response, error } = await client.POST('/api/v1/billing/storage-usage', {
        body: {
          user_id: usage.userId,
          period_start: usage.periodStart.toISOString(),
          period_end: usage.periodEnd.toISOString(),
          bytes: usage.bytes,
        },
      });
      if (response.ok) return;
      const problem = (error ?? {}) as { code?: string; detail?: string };
      const what = { user_id: usage.userId, status: response.status, code: problem.code, detail: problem.detail };
      if (FINAL.has(response.status)) {
        logger.warn(what, 'billing refused a storage usage report');
        return;
      }
      throw new Error(`billing answered ${response.status} ${problem.code ?? ''}`.trim());
    },
  };
}
