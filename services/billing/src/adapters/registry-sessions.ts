/**
 * Billing's session events to the provider registry over HTTP, for a billing that runs without NATS (`pnpm start`):
 * an `EventPublisher` for billing's transactional outbox whose "publish" of a session event is the registry's
 * `PUT /providers/{id}/sessions/{sessionId}` (the session runs: `session.started`, `session.grace_period`,
 * `session.resumed`) or `DELETE` (it ended: `session.completed`, `session.terminated`, with its `end_reason`), with
 * billing's machine client and the event's correlation ID. Other events have no HTTP reader and count as sent.
 *
 * Because the events go through the outbox, a call that fails is not lost: the row stays unpublished and the relay
 * tries it again on its next run (every second, oldest first, stopping at the first failure so the order holds),
 * until the registry answers. Answers that can never change (404: the registry does not know the provider; 409: the
 * session has ended there already; 400: the provider ID is not a registry ID) count as delivered and are logged.
 */
import { registryClient } from '@gpu/client';
import { durationMs, type EventPublisher, type Logger, type PublishOptions } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import { lazyTokens } from './provider-registry.ts';

const RUNNING = new Set(['session.started', 'session.grace_period', 'session.resumed']);
const ENDED = new Set(['session.completed', 'session.terminated']);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Answers that a retry cannot change. */
const FINAL = new Set([400, 404, 409]);

interface SessionEventBody {
  kind?: string;
  session?: { id?: string; provider_id?: string; end_reason?: string | null };
}

/** The publisher of session events to the registry configured in `provider_registry`; null without its URL. */
export function registrySessionPublisher(
  config: BillingConfig['provider_registry'],
  logger: Logger,
): EventPublisher | null {
  if (!config.url) return null;
  const client = registryClient({
    baseUrl: config.url,
    token: lazyTokens({
      url: config.url,
      authUrl: config.auth_url,
      clientId: config.client_id || undefined,
      clientSecret: config.client_secret || undefined,
      credentialsFile: config.credentials_file || undefined,
      timeoutMs: durationMs(config.timeout),
      cacheTtlMs: 0,
    }),
    timeoutMs: durationMs(config.timeout),
    retries: 2,
  });
  return {
    enabled: true,
    async publish(_subject: string, data: unknown, opts: PublishOptions = {}): Promise<string> {
      const msgId = opts.msgId ?? '';
      const body = (typeof data === 'string' ? JSON.parse(data) : data) as SessionEventBody;
      const kind = body.kind ?? '';
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
      const request = {
        params: { path: { providerID: providerId, sessionID: sessionId } },
        headers: opts.correlationId ? { 'x-correlation-id': opts.correlationId } : {},
      };
      const path = '/providers/{providerID}/sessions/{sessionID}';
      // An end carries its reason: the registry counts the machine's faults in its reliability.
      const endReason = body.session?.end_reason;
      const result = RUNNING.has(kind)
        ? await client.PUT(path, request)
        : await client.DELETE(path, {
            ...request,
            params: { ...request.params, query: endReason ? { end_reason: endReason } : {} },
          });
      const status = result.response.status;
      if (result.response.ok) return msgId;
      const problem = (result.error ?? {}) as { code?: string; detail?: string };
      if (FINAL.has(status)) {
        logger.info(
          { session_id: sessionId, provider_id: providerId, status, code: problem.code },
          'registry declined a session report',
        );
        return msgId;
      }
      throw new Error(`the provider registry answered ${status} ${problem.code ?? ''} to a session report`);
    },
    async ping() {},
    async close() {},
  };
}
