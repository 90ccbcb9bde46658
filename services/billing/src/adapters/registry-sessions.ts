/**
 * Billing's messages to the provider registry over HTTP, for a billing that runs without NATS (`pnpm start`): an
 * `EventPublisher` for billing's transactional outbox whose "publish" of an event is the registry's route for it: a
 * statement of a machine's held GPUs (`lease.held`) is `PUT /providers/{id}/gpus-held`, a session's end
 * (`session.completed`, `session.terminated`, with its `end_reason` and renter) `PUT
 * /providers/{id}/ended-sessions/{sessionId}`, the platform's price card (`pricing.platform_rates`) `PUT /prices` and
 * a machine's own rates (`pricing.provider_rates`) `PUT /providers/{id}/prices`, with billing's machine client and
 * the event's correlation ID. Other events have no HTTP reader and count as sent.
 *
 * Because the events go through the outbox, a call that fails is not lost: the row stays unpublished and the relay
 * tries it again on its next run (every second, oldest first, stopping at the first failure so the order holds),
 * until the registry answers. Answers that can never change (404: the registry does not know the provider; 400: the
 * provider ID is not a registry ID) count as delivered and are logged.
 */
import { registryClient } from '@gpu/client';
import {
  durationMs,
  type EventPublisher,
  GPUS_HELD_EVENT_KIND,
  type Logger,
  type PublishOptions,
  SESSION_ENDED_EVENT_KINDS,
} from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import { configuredTokens } from './provider-registry.ts';

const ENDED = new Set<string>(SESSION_ENDED_EVENT_KINDS);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Answers that a retry cannot change. */
const FINAL = new Set([400, 404]);

/** The parts of billing's events the registry is called with. */
interface EventBody {
  kind?: string;
  session?: { id?: string; provider_id?: string; user_id?: string; end_reason?: string | null };
  card?: unknown;
  provider_id?: string;
  rates?: unknown;
  version?: number;
  gpu_indices?: number[];
}

/** The publisher of session events to the registry configured in `provider_registry`; null without its URL. */
export function registrySessionPublisher(
  config: BillingConfig['provider_registry'],
  logger: Logger,
): EventPublisher | null {
  if (!config.url) return null;
  const client = registryClient({
    baseUrl: config.url,
    token: configuredTokens(config),
    timeoutMs: durationMs(config.timeout),
    retries: 2,
  });
  /** A call's outcome: delivered (or never to be), or an error for the relay to try it again. */
  const settled = (response: Response, error: unknown, what: string, ids: Record<string, string>, msgId: string) => {
    const status = response.status;
    if (response.ok) return msgId;
    const problem = (error ?? {}) as { code?: string; detail?: string };
    if (FINAL.has(status)) {
      logger.info({ ...ids, status, code: problem.code }, `registry declined a ${what}`);
      return msgId;
    }
    throw new Error(`the provider registry answered ${status} ${problem.code ?? ''} to a ${what}`);
  };

  return {
    enabled: true,
    async publish(_subject: string, data: unknown, opts: PublishOptions = {}): Promise<string> {
      const msgId = opts.msgId ?? '';
      const body = (typeof data === 'string' ? JSON.parse(data) : data) as EventBody;
      const kind = body.kind ?? '';
      const headers = opts.correlationId ? { 'x-correlation-id': opts.correlationId } : {};
      if (kind === 'pricing.platform_rates' && body.card) {
        const result = await client.PUT('/prices', { body: body.card as never, headers });
        return settled(result.response, result.error, 'price card', {}, msgId);
      }
      if (kind === 'pricing.provider_rates' && body.rates && UUID.test(body.provider_id ?? '')) {
        const result = await client.PUT('/providers/{providerID}/prices', {
          params: { path: { providerID: body.provider_id! } },
          body: body.rates as never,
          headers,
        });
        return settled(result.response, result.error, "machine's rates", { provider_id: body.provider_id! }, msgId);
      }
      if (kind === GPUS_HELD_EVENT_KIND && UUID.test(body.provider_id ?? '')) {
        const providerId = body.provider_id!;
        const result = await client.PUT('/providers/{providerID}/gpus-held', {
          params: { path: { providerID: providerId } },
          body: { version: body.version ?? 0, gpu_indices: body.gpu_indices ?? [] },
          headers,
        });
        return settled(result.response, result.error, 'statement of held GPUs', { provider_id: providerId }, msgId);
      }
      if (!ENDED.has(kind)) return msgId;
      const sessionId = body.session?.id ?? '';
      const providerId = body.session?.provider_id ?? '';
      if (!UUID.test(providerId)) {
        logger.info(
          { session_id: sessionId, provider_id: providerId },
          'session of a provider the registry cannot know',
        );
        return msgId;
      }
      // An end carries its reason and renter: the registry counts the machine's faults in its reliability, and not
      // the rentals of its own owner.
      const endReason = body.session?.end_reason;
      const renterId = body.session?.user_id;
      const result = await client.PUT('/providers/{providerID}/ended-sessions/{sessionID}', {
        params: { path: { providerID: providerId, sessionID: sessionId } },
        body: {
          ...(endReason ? { end_reason: endReason } : {}),
          ...(renterId && UUID.test(renterId) ? { renter_id: renterId } : {}),
        },
        headers,
      });
      return settled(
        result.response,
        result.error,
        'session end',
        { session_id: sessionId, provider_id: providerId },
        msgId,
      );
    },
    async ping() {},
    async close() {},
  };
}
