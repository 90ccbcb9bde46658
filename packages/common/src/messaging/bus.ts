/**
 * One path for every message a service takes from another: a message kind is one schema and one handler
 * (`MessageHandler`), and the transport that brings it — a durable JetStream consumer (`startBusConsumer`) or the
 * service's HTTP inbox (`POST /messages`, `inboxRoute` in `http/inbox.ts`) — is a detail the handler never sees. A new
 * kind is one handler added to the service's list; both transports take it at once.
 *
 * A message is an event's body as the sender's outbox writes it (`{event_id, kind, occurred_at, ...data}`). The bus
 * dispatches by `kind`: a kind it has no handler for is acknowledged and ignored (another reader's), a body its
 * handler's schema refuses can never apply (terminated over NATS, 400 over HTTP), and a handler's throw is a failure
 * to try again (redelivered over NATS, a 5xx over HTTP: the sender's outbox calls again).
 */
import type { JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { z } from 'zod';
import { type DurableConsumer, type Settlement, startDurableConsumer } from './consumer.ts';

/** What the transport knows of a message besides its body. */
export interface MessageMeta {
  /** The sender's correlation ID (the `X-Correlation-ID` header of the message or the call). */
  correlationId?: string;
}

/** One kind of message: its body's schema (its `kind` a literal) and what to do with one. */
export interface MessageHandler<T extends { kind: string } = { kind: string }> {
  kind: T['kind'];
  schema: z.ZodType<T>;
  /** Applies one message; `term` when it can never apply (the transport gives up on it), else acknowledged. */
  // biome-ignore lint/suspicious/noConfusingVoidType: a handler that acknowledges returns nothing (void), as handlers are written
  handle(message: T, meta: MessageMeta): Promise<void | 'term'>;
}

/** A handler for a bus's list: its message type checked here, erased in the list (the bus checks each by its schema). */
export function onMessage<T extends { kind: string }>(handler: MessageHandler<T>): MessageHandler {
  return handler as unknown as MessageHandler;
}

/** How a message was settled: applied, ignored (no handler for its kind), or refused by its kind's schema. */
export type Delivery =
  | { outcome: 'applied' | 'ignored' | 'unapplicable'; kind: string }
  | { outcome: 'malformed'; kind: string; error: z.ZodError };

const anyKind = z.object({ kind: z.string().min(1).max(100) }).loose();

/** The handlers of one service, by kind. */
export class MessageBus {
  private readonly byKind = new Map<string, MessageHandler>();

  constructor(handlers: readonly MessageHandler[]) {
    for (const h of handlers) {
      if (this.byKind.has(h.kind)) throw new Error(`two handlers of message kind ${h.kind}`);
      this.byKind.set(h.kind, h);
    }
  }

  /** The kinds it takes. */
  kinds(): string[] {
    return [...this.byKind.keys()];
  }

  /** The handlers' schemas, for an inbox's documented body. */
  schemas(): z.ZodType[] {
    return [...this.byKind.values()].map((h) => h.schema);
  }

  /** Decodes the body by its kind's schema and hands it to the handler; a throw is the handler's (try again). */
  async deliver(body: unknown, meta: MessageMeta = {}): Promise<Delivery> {
    const head = anyKind.safeParse(body);
    if (!head.success) return { outcome: 'malformed', kind: '', error: head.error };
    const handler = this.byKind.get(head.data.kind);
    if (!handler) return { outcome: 'ignored', kind: head.data.kind };
    const parsed = handler.schema.safeParse(body);
    if (!parsed.success) return { outcome: 'malformed', kind: handler.kind, error: parsed.error };
    const done = await handler.handle(parsed.data, meta);
    return { outcome: done === 'term' ? 'unapplicable' : 'applied', kind: handler.kind };
  }
}

export interface BusConsumerOptions {
  connection: NatsConnection;
  bus: MessageBus;
  /** Names the consumer in logs and health messages. */
  name: string;
  durable: string;
  /** The subjects it takes. */
  filter: string;
  /** As `startDurableConsumer`'s: the service's own stream, or another service's to wait for. */
  stream: { ensure: string } | { await: string };
  ackWaitMs?: number;
  logger: Logger;
}

/** The bus over a durable JetStream consumer: each message is delivered to the bus and settled by what it did. */
export function startBusConsumer(opts: BusConsumerOptions): DurableConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: opts.name,
    what: 'message',
    durable: opts.durable,
    filter: opts.filter,
    stream: opts.stream,
    ackWaitMs: opts.ackWaitMs,
    schema: anyKind,
    handle: async (body, msg: JsMsg): Promise<Settlement> => {
      const delivery = await opts.bus.deliver(body, {
        correlationId: msg.headers?.get('X-Correlation-ID') || undefined,
      });
      if (delivery.outcome === 'malformed') {
        opts.logger.warn(
          { kind: delivery.kind, seq: msg.seq, issues: delivery.error.issues.slice(0, 5) },
          'malformed message dropped',
        );
        return 'term';
      }
      return delivery.outcome === 'unapplicable' ? 'term' : 'ack';
    },
    logger: opts.logger,
  });
}
