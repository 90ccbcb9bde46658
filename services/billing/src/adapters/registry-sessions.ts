/**
 * Billing's session events to the provider registry over HTTP, for a billing that runs without NATS (`pnpm start`):
 * an `EventPublisher` for billing's transactional outbox whose "publish" of a session event is the registry's
 * `PUT /providers/{id}/sessions/{sessionId}` (the session runs: `session.started`, `session.grace_period`,
 * `session.resumed`; its body names the GPUs the session holds) or `DELETE` (it ended: `session.completed`, `session.terminated`, with its `end_reason`), and
 * of a price event the market's (`pricing.platform_rates`: `PUT /prices`; `pricing.provider_rates`:
 * `PUT /providers/{id}/prices`), and of a reservation the same session routes with `kind: reservation`
 * (`lease.reserved`: `PUT` with its GPUs and `expires_at`; `lease.released`: `DELETE ?kind=reservation`), with
 * billing's machine client and the event's correlation ID. Other events have no HTTP reader and count as sent.
 *
 * Because the events go through the outbox, a call that fails is not lost: the row stays unpublished and the relay
 * tries it again on its next run (every second, oldest first, stopping at the first failure so the order holds),
 * until the registry answers. Answers that can never change (404: the registry does not know the provider; 409: the
 * session has ended there already; 400: the provider ID is not a registry ID) count as delivered and are logged.
 */
import { registryClient } from '@gpu/client';
import {
  durationMs,
  type EventPublisher,
  type Logger,
  type PublishOptions,
  SESSION_ENDED_EVENT_KINDS,
  SESSION_RUNNING_EVENT_KINDS,
} from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import { configuredTokens } from './provider-registry.ts';

const RUNNING = new Set<string>(SESSION_RUNNING_EVENT_KINDS.filter((k) => k !== 'session.low_balance'));
const ENDED = new Set<string>(SESSION_ENDED_EVENT_KINDS);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Answers that a retry cannot change. */
const FINAL = new Set([400, 404, 409]);

/** The parts of billing's events the registry is called with. */
interface EventBody {
  kind?: string;
  session?: {
    id?: string;
    provider_id?: string;
    user_id?: string;
    end_reason?: string | null;
    gpu_indices?: number[] | null;
  };
  card?: unknown;
  provider_id?: string;
  rates?: unknown;
  reservation?: { id?: string; provider_id?: string; gpu_indices?: number[]; expires_at?: string };
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
      if ((kind === 'lease.reserved' || kind === 'lease.released') && body.reservation) {
        const { id = '', provider_id: providerId = '', gpu_indices, expires_at } = body.reservation;
        if (!UUID.test(providerId)) return msgId;
        const path = '/providers/{providerID}/sessions/{sessionID}';
        const params = { path: { providerID: providerId, sessionID: id } };
        const result =
          kind === 'lease.reserved'
            ? await client.PUT(path, {
                params,
                body: { gpu_indices, kind: 'reservation', expires_at },
                headers,
              })
            : await client.DELETE(path, { params: { ...params, query: { kind: 'reservation' } }, headers });
        return settled(
          result.response,
          result.error,
          'reservation',
          { reservation_id: id, provider_id: providerId },
          msgId,
        );
      }
      if (!RUNNING.has(kind) && !ENDED.has(kind)) return msgId;
      const sessionId = body.session?.id ?? '';
      const providerId = body.session?.provider_id ?? '';
      if (!UUID.test(providerId)) {
        logger.info(
          { session_id: sessionId, provider_id: providerId },
          'session of a provider the registry cannot know',
        );
        return msgId;
      }
      const request = { params: { path: { providerID: providerId, sessionID: sessionId } }, headers };
      const path = '/providers/{providerID}/sessions/{sessionID}';
      // An end carries its reason and renter: the registry counts the machine's faults in its reliability, and not
      // the rentals of its own owner.
      const endReason = body.session?.end_reason;
      const renterId = body.session?.user_id;
      const query = {
        ...(endReason ? { end_reason: endReason } : {}),
        ...(renterId && UUID.test(renterId) ? { renter_id: renterId } : {}),
      };
      // A running session names the GPUs it holds (none named: the whole machine, as before per-GPU leases).
      const gpuIndices = body.session?.gpu_indices;
      const result = RUNNING.has(kind)
        ? await client.PUT(path, { ...request, body: gpuIndices ? { gpu_indices: gpuIndices } : {} })
        : await client.DELETE(path, { ...request, params: { ...request.params, query } });
      return settled(
        result.response,
        result.error,
        'session report',
        { session_id: sessionId, provider_id: providerId },
        msgId,
      );
    },
    async ping() {},
    async close() {},
  };
}
