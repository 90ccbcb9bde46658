/**
 * Billing as the meter's `UsageSink`, with the storage service's machine token (client credentials at the auth
 * service):
 *
 * - over HTTP, `POST /api/v1/billing/storage-usage` through the platform's typed client (a time limit per attempt,
 *   bounded retries). An answer that a retry cannot change (400, 403, 404, 409: a period overlapping another) is
 *   logged and counts as delivered; a network failure or a 5xx throws, so the meter tries again at the next period.
 * - over NATS, a JetStream publish to `<subjects.usage>.<user_id>` with the token in an `Authorization` header and the
 *   message ID `storage:<user_id>:<period start>` (JetStream drops a duplicate within its window; billing charges a
 *   period once whatever arrives). Delivered once the stream acknowledged it; billing's consumer charges it.
 */
import { billingClient, lazyClientCredentials, type TokenSource } from '@gpu/client';
import { durationMs, type EventPublisher, type Logger } from '@gpu/common';
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
    token: token ?? meteringToken(settings),
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

/** The storage service's machine token, as `metering` names its client. */
function meteringToken(settings: StorageConfig['metering']): TokenSource {
  return lazyClientCredentials({
    authUrl: settings.auth_url,
    clientId: settings.client_id,
    clientSecret: settings.client_secret,
    credentialsFile: settings.credentials_file,
  });
}

/** The sink publishing to NATS, or null when metering is off (`interval: 0s`) or the publisher is not connected. */
export function natsUsageSink(
  settings: StorageConfig['metering'],
  subjectPrefix: string,
  publisher: EventPublisher,
  token?: TokenSource,
): UsageSink | null {
  if (!publisher.enabled || durationMs(settings.interval) <= 0) return null;
  const tokens = token ?? meteringToken(settings);
  return {
    async report(usage: StorageUsage) {
      const periodStart = usage.periodStart.toISOString();
      await publisher.publish(
        `${subjectPrefix}.${usage.userId}`,
        {
          user_id: usage.userId,
          period_start: periodStart,
          period_end: usage.periodEnd.toISOString(),
          bytes: usage.bytes,
        },
        {
          msgId: `storage:${usage.userId}:${periodStart}`,
          headers: { Authorization: `Bearer ${await tokens.get()}` },
        },
      );
    },
  };
}
