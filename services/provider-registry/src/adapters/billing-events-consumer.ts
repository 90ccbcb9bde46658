/**
 * Billing's session events into the registry: a durable JetStream pull consumer (`provider-registry-sessions` on
 * billing's stream `BILLING_EVENTS`, subjects `<billing events prefix>.session.>`, explicit ack) that reports each
 * session's start or end to `ProviderSessions`, which keeps rented providers `busy` (domain/provider-sessions.ts).
 *
 * `session.started`, `session.grace_period` and `session.resumed` say the session runs; `session.completed` and
 * `session.terminated` that it ended. Reports are idempotent and order-free, so redeliveries and duplicates are
 * harmless. An event that can never apply is settled and logged (malformed, or its provider ID not a UUID:
 * terminated; about a provider the registry does not know: acknowledged); any other failure (the database away) is
 * nak'ed and redelivered later.
 *
 * Messages on billing's stream act as the billing service (a `service` principal): only billing publishes there,
 * which the NATS server's permissions enforce in a deployment.
 */
import { awaitStream, isAppError, type Logger, type NatsPublisher, type Principal } from '@gpu/common';
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { z } from 'zod';
import type { ProviderSessions } from '../domain/provider-sessions.ts';

export const SESSION_CONSUMER = 'provider-registry-sessions';

const RUNNING_KINDS = ['session.started', 'session.grace_period', 'session.resumed'] as const;
const ENDED_KINDS = ['session.completed', 'session.terminated'] as const;

/** The part of billing's session event the registry reads (the rest of its body is billing's session JSON). */
const sessionEventSchema = z.object({
  kind: z.enum([...RUNNING_KINDS, ...ENDED_KINDS]),
  session: z.object({ id: z.uuid(), provider_id: z.uuid() }),
});

/** Who a message of billing's stream acts as. */
const BILLING_EVENTS_PRINCIPAL: Principal = Object.freeze({
  subject: 'billing-events',
  kind: 'client' as const,
  roles: ['service' as const],
  tokenId: 'nats-billing-events',
});

export interface SessionConsumerOptions {
  connection: NatsPublisher['connection'];
  sessions: ProviderSessions;
  /** Billing's event subject prefix (`billing.events`): session events arrive on `<prefix>.session.<what>`. */
  prefix: string;
  durable?: string;
  logger: Logger;
}

export interface SessionConsumer {
  stop(): Promise<void>;
}

/**
 * Starts consuming in the background: waits for billing's stream (the stream that captures its session subjects,
 * whatever its name; billing creates it), makes the durable consumer if it is missing, then applies each event.
 */
export function startSessionConsumer(opts: SessionConsumerOptions): SessionConsumer {
  const durable = opts.durable ?? SESSION_CONSUMER;
  const filter = `${opts.prefix}.session.>`;
  const abort = new AbortController();
  let messages: ConsumerMessages | undefined;
  const loop = (async () => {
    const jsm = await jetstreamManager(opts.connection);
    const stream = await awaitStream(jsm, filter, {
      signal: abort.signal,
      onWait: (n) => {
        if (n === 1) opts.logger.info({ subject: filter }, "waiting for billing's event stream");
      },
    });
    const existing = await jsm.consumers.info(stream, durable).catch(() => undefined);
    if (!existing) {
      await jsm.consumers.add(stream, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: filter,
        ack_wait: 30_000_000_000,
        max_deliver: -1,
      });
    }
    const consumer = await jetstream(opts.connection).consumers.get(stream, durable);
    messages = await consumer.consume({ max_messages: 64 });
    if (abort.signal.aborted) await messages.close();
    for await (const msg of messages) await handle(opts, msg);
  })().catch((err) => {
    if (!abort.signal.aborted) opts.logger.error({ err: (err as Error).message }, 'session event consumer failed');
  });
  return {
    async stop() {
      abort.abort();
      await messages?.close();
      await loop;
    },
  };
}

async function handle(opts: SessionConsumerOptions, msg: JsMsg): Promise<void> {
  let event: z.infer<typeof sessionEventSchema>;
  try {
    event = sessionEventSchema.parse(msg.json());
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, 'malformed session event dropped');
    msg.term();
    return;
  }
  const { id, provider_id } = event.session;
  const running = (RUNNING_KINDS as readonly string[]).includes(event.kind);
  try {
    await opts.sessions.report(
      BILLING_EVENTS_PRINCIPAL,
      provider_id,
      id,
      running,
      msg.headers?.get('X-Correlation-ID') || undefined,
    );
    msg.ack();
  } catch (err) {
    if (isAppError(err) && err.code === 'PROVIDER_NOT_FOUND') {
      opts.logger.info({ session_id: id, provider_id }, 'session event about an unknown provider ignored');
      msg.ack();
      return;
    }
    opts.logger.warn({ err: (err as Error).message, session_id: id }, 'session event failed; will retry');
    msg.nak(5_000);
  }
}
