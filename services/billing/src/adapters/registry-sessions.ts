/**
 * Billing's messages to the provider registry over HTTP, for a billing that runs without NATS (`pnpm start`): an
 * `EventPublisher` for billing's transactional outbox whose "publish" of an event the registry takes (common's
 * `REGISTRY_MESSAGE_KINDS`: held GPUs, rentals' ends, prices) posts its body, as NATS would carry it, to the registry's
 * inbox (`POST /messages`: the same schemas and handlers as its JetStream consumers), with billing's machine client
 * and the event's correlation ID. Other events have no HTTP reader and count as sent.
 *
 * Because the events go through the outbox, a call that fails is not lost: the row stays unpublished and the relay
 * tries it again on its next run (every second, oldest first, stopping at the first failure so the order holds),
 * until the registry answers. A 400 (a body the registry's schema refuses) can never change: counted as delivered and
 * logged; a message about a machine the registry does not know is answered 200 `unapplicable`.
 */
import { registryClient } from '@gpu/client';
import { durationMs, type EventPublisher, type Logger, type PublishOptions, REGISTRY_MESSAGE_KINDS } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import { configuredTokens } from './provider-registry.ts';

/** The kinds the registry takes (its message bus); other events have no HTTP reader. */
const TAKEN = new Set<string>(REGISTRY_MESSAGE_KINDS);
/** Answers that a retry cannot change. */
const FINAL = new Set([400]);

/** The publisher of the registry's messages to the registry configured in `provider_registry`; null without its URL. */
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
  const settled = (response: Response, error: unknown, what: string, msgId: string) => {
    const status = response.status;
    if (response.ok) return msgId;
    const problem = (error ?? {}) as { code?: string; detail?: string };
    if (FINAL.has(status)) {
      logger.warn({ kind: what, status, code: problem.code, detail: problem.detail }, `registry refused a ${what}`);
      return msgId;
    }
    throw new Error(`the provider registry answered ${status} ${problem.code ?? ''} to a ${what}`);
  };

  return {
    enabled: true,
    async publish(_subject: string, data: unknown, opts: PublishOptions = {}): Promise<string> {
      const msgId = opts.msgId ?? '';
      const body = (typeof data === 'string' ? JSON.parse(data) : data) as { kind?: string };
      if (!TAKEN.has(body.kind ?? '')) return msgId;
      const headers = opts.correlationId ? { 'x-correlation-id': opts.correlationId } : {};
      const result = await client.POST('/messages', { body: body as never, headers });
      return settled(result.response, result.error, body.kind!, msgId);
    },
    async ping() {},
    async close() {},
  };
}
