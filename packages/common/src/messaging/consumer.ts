/**
 * The one durable JetStream consumer loop every service uses for events in: it finds or makes the stream, binds
 * (or creates) the durable pull consumer with explicit ack, hands each decoded message to the service's handler with
 * a bounded number in hand, settles it by the handler's outcome, follows the consumer's notifications for /health,
 * and stops cleanly. The handler stays thin: message -> domain call -> outcome.
 *
 * Settling: `ack` (applied, or nothing to apply), `term` (can never apply: never delivered again), `retry` (nak'ed,
 * delivered again after `retryDelayMs`). A message that fails the schema is terminated and logged as malformed; a
 * handler that throws has its message retried (a transient failure, such as the database away), at most `maxDeliver`
 * deliveries in all: then the consumer gives up on it, logs an error naming its stream and sequence (it stays in the
 * stream until the stream's age limit, for an operator to read and publish again) and terminates it, so one
 * message that can never apply does not come back for ever.
 */
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import type { ZodType } from 'zod';
import { inSpanOf, markSpanFailed, tracingOn } from '../telemetry/tracing.ts';
import { awaitStream, ensureStream } from './stream.ts';

/** What becomes of a handled message. */
export type Settlement = 'ack' | 'term' | 'retry';

export interface DurableConsumerOptions<T> {
  connection: NatsConnection;
  /** Names the consumer in logs and health messages: `usage consumer`. */
  name: string;
  /** Names one message in logs: `usage message` (`malformed usage message dropped`, `usage message failed; will retry`). */
  what: string;
  /** The durable consumer's name. */
  durable: string;
  /** The subjects the consumer takes (its filter subject). */
  filter: string;
  /**
   * The stream: `{ ensure: name }` the service's own, created or widened to capture `filter`; `{ await: words }`
   * another service's, whatever its name, waited for until its owner made it (`words` name it in the log).
   */
  stream: { ensure: string } | { await: string };
  /** How long a delivered message may stay unsettled before it is delivered again (default 30 s). */
  ackWaitMs?: number;
  /**
   * How many times a message is delivered at most before the consumer gives up on it (see above); default
   * `DEFAULT_MAX_DELIVER`, an hour of retries at the default delay.
   */
  maxDeliver?: number;
  /** How many messages are pulled at once (default 64, and never fewer than `concurrency`). */
  batch?: number;
  /** How many messages are handled at once (default 1: one after another, in the stream's order). */
  concurrency?: number;
  /** The pause before a retried message comes again (default 5 s). */
  retryDelayMs?: number;
  /** Decodes the JSON payload; a message it refuses is terminated. */
  schema: ZodType<T>;
  /** Applies one decoded message and says how to settle it; a throw retries it. */
  handle(body: T, msg: JsMsg): Promise<Settlement>;
  /** Called for each malformed message (to count it). */
  onMalformed?(): void;
  /** Called for each message given up on after `maxDeliver` failed deliveries (to count it). */
  onGaveUp?(): void;
  logger: Logger;
}

/** The default bound of deliveries: 720, an hour of retries 5 s apart, long enough to wait out a database restart. */
const DEFAULT_MAX_DELIVER = 720;

/** Notifications that mean no message will arrive until something changes. */
const TROUBLE = new Set([
  'heartbeats_missed',
  'consumer_not_found',
  'stream_not_found',
  'consumer_deleted',
  'no_responders',
]);

/** A running durable consumer. Start one with `startDurableConsumer`. */
export interface DurableConsumer {
  /** The durable consumer's name. */
  readonly durable: string;
  /**
   * Messages of its subjects not yet settled: not yet delivered, or delivered and not yet acknowledged (JetStream's
   * `num_pending` + `num_ack_pending`); undefined before it is bound. The consumer's lag, for `/metrics`.
   */
  pending(): Promise<number | undefined>;
  /**
   * Resolves once the stream and the durable consumer exist and messages flow; rejects when that failed. Waiting for
   * another service's stream may take long: a caller that needs its own stream ready awaits this.
   */
  readonly ready: Promise<void>;
  /** For /health: rejects naming what is wrong (failed, stopped receiving, consumer deleted, ...). */
  check(): Promise<void>;
  /** Stops pulling, finishes and settles the messages in hand, then resolves. */
  stop(): Promise<void>;
}

/** Starts consuming in the background; see `DurableConsumer.ready` for when messages flow. */
export function startDurableConsumer<T>(opts: DurableConsumerOptions<T>): DurableConsumer {
  const abort = new AbortController();
  let messages: ConsumerMessages | undefined;
  let trouble: string | null = null;
  let failed: string | null = null;
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });

  const maxDeliver = opts.maxDeliver ?? DEFAULT_MAX_DELIVER;
  /** Where the consumer is, once bound (for `pending`: a manager of its own whose requests wait 1 s at most). */
  let bound: { jsm: Awaited<ReturnType<typeof jetstreamManager>>; stream: string } | undefined;
  const bind = async (): Promise<ConsumerMessages> => {
    const jsm = await jetstreamManager(opts.connection);
    let stream: string;
    if ('ensure' in opts.stream) {
      stream = opts.stream.ensure;
      await ensureStream(jsm, { name: stream, subjects: [opts.filter] });
    } else {
      const words = opts.stream.await;
      stream = await awaitStream(jsm, opts.filter, {
        signal: abort.signal,
        onWait: (n) => {
          if (n === 1) opts.logger.info({ subject: opts.filter }, `waiting for ${words}`);
        },
      });
    }
    const existing = await jsm.consumers.info(stream, opts.durable).catch(() => undefined);
    const ackWait = (opts.ackWaitMs ?? 30_000) * 1_000_000;
    if (!existing) {
      await jsm.consumers.add(stream, {
        durable_name: opts.durable,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: opts.filter,
        ack_wait: ackWait,
        max_deliver: maxDeliver,
      });
    } else if (existing.config.filter_subject !== opts.filter) {
      // Instances share the durable consumer: one started with another subject must not rewrite it under those
      // still running with the old one (they would drop the new subject's messages, and the old subject's would no
      // longer be delivered). It stays down instead, and says what to do; the messages wait in the stream.
      throw new Error(
        `the durable consumer "${opts.durable}" on stream ${stream} reads ${existing.config.filter_subject}, ` +
          `not the configured ${opts.filter}: give the new subject a durable consumer of its own (a new name), and ` +
          'delete the old one once its messages are consumed',
      );
    } else if (existing.config.ack_wait !== ackWait || existing.config.max_deliver !== maxDeliver) {
      // The consumer outlives instances: a changed ack wait or delivery bound takes effect on it (the instances
      // agreeing on it).
      await jsm.consumers.update(stream, opts.durable, { ack_wait: ackWait, max_deliver: maxDeliver });
    }
    const consumer = await jetstream(opts.connection).consumers.get(stream, opts.durable);
    bound = { jsm: await jetstreamManager(opts.connection, { timeout: 1_000 }), stream };
    const limit = opts.concurrency ?? 1;
    return consumer.consume({ max_messages: Math.max(limit, opts.batch ?? 64) });
  };

  const watch = async (from: ConsumerMessages): Promise<void> => {
    for await (const note of from.status()) {
      if (TROUBLE.has(note.type)) {
        trouble = note.type.replaceAll('_', ' ');
        opts.logger.warn({ notification: note }, `${opts.name} cannot receive messages`);
      } else if (note.type === 'heartbeat') trouble = null;
    }
  };

  const fail = (why: string) => {
    failed = why;
    opts.logger.error(failed);
  };
  const done = (async () => {
    messages = await bind();
    if (abort.signal.aborted) await messages.close();
    markReady();
    void watch(messages).catch(() => {});
    await handleInTurn(opts, messages, abort.signal, () => {
      trouble = null;
    });
  })().then(
    () => {
      if (!abort.signal.aborted) fail(`${opts.name} stopped receiving messages`);
    },
    (err) => {
      if (abort.signal.aborted) return;
      fail(`${opts.name} failed: ${(err as Error).message}`);
      throw err;
    },
  );
  // Settles once messages flow, or once the consumer ended without getting there (stopped, or failed: rejects).
  const started = Promise.race([ready, done]);
  started.catch(() => {});
  return {
    durable: opts.durable,
    async pending() {
      if (!bound) return undefined;
      const info = await bound.jsm.consumers.info(bound.stream, opts.durable);
      return info.num_pending + info.num_ack_pending;
    },
    ready: started,
    async check() {
      if (failed) throw new Error(failed);
      if (abort.signal.aborted) throw new Error(`${opts.name} is stopped`);
      if (trouble) throw new Error(`${opts.name}: ${trouble}`);
    },
    async stop() {
      abort.abort();
      await messages?.close();
      await done.catch(() => {});
    },
  };
}

/**
 * The W3C trace context a NATS message's headers carry (tracing on; undefined when off, or when they carry none): what
 * a consumer's span continues.
 */
export function messageTraceContext(
  headers: { get(name: string): string } | undefined,
): Record<string, string> | undefined {
  if (!tracingOn()) return undefined;
  const traceparent = headers?.get('traceparent');
  if (!traceparent) return undefined;
  const tracestate = headers?.get('tracestate');
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/**
 * `<prefix>_consumer_pending{consumer}`: each durable consumer's messages not yet settled, read from JetStream when
 * Prometheus scrapes (one consumer-info request each, all at once, each given 1 s: NATS away never holds the scrape
 * past its timeout); a consumer not bound yet, or whose info cannot be read, is left out of that scrape.
 */
export function consumerPendingGauge(
  prefix: string,
  consumers: Pick<DurableConsumer, 'durable' | 'pending'>[],
  logger: Logger,
): Gauge {
  return new Gauge({
    name: `${prefix}_consumer_pending`,
    help: 'NATS messages of a durable consumer not yet handled (not delivered, or delivered and not acknowledged)',
    labelNames: ['consumer'],
    registers: [],
    async collect() {
      const read = await Promise.allSettled(consumers.map((c) => c.pending()));
      this.reset();
      read.forEach((r, i) => {
        const durable = consumers[i]!.durable;
        if (r.status === 'fulfilled') {
          if (r.value !== undefined) this.set({ consumer: durable }, r.value);
        } else {
          logger.warn({ err: (r.reason as Error).message, consumer: durable }, 'reading a consumer lag failed');
        }
      });
    },
  });
}

/**
 * Hands the messages received to the handler, `concurrency` at a time, in the order they came. The client receives
 * ahead of the handler (it pulls again as messages arrive, up to the server's bound of unacknowledged ones), and each
 * message's ack wait runs from its delivery: those waiting their turn are told the server they are being worked on
 * (`working()`, which restarts their ack wait) every third of it, so that a handler slower than the ack wait over the
 * messages queued does not have them delivered again, out of order, each delivery counted towards `maxDeliver`. Only
 * while the handler makes progress (a message began or settled within the last ack wait): a handler stuck for longer
 * lets them run out, for another instance to take. A stop begins no more and keeps none alive (those waiting come
 * again, after their ack wait, to the next consumer), and waits for those in hand.
 */
async function handleInTurn<T>(
  opts: DurableConsumerOptions<T>,
  messages: ConsumerMessages,
  stopping: AbortSignal,
  onMessage: () => void,
): Promise<void> {
  const limit = opts.concurrency ?? 1;
  const waiting: JsMsg[] = [];
  const inFlight = new Set<Promise<void>>();
  let received = true;
  let wake: (() => void) | undefined;
  const nudge = () => {
    wake?.();
    wake = undefined;
  };
  const ackWaitMs = opts.ackWaitMs ?? 30_000;
  let progressAt = Date.now();
  const keepAlive = setInterval(
    () => {
      if (stopping.aborted || Date.now() - progressAt > ackWaitMs) return;
      for (const msg of waiting) msg.working();
    },
    Math.max(100, Math.floor(ackWaitMs / 3)),
  );
  keepAlive.unref();
  const receiving = (async () => {
    try {
      for await (const msg of messages) {
        onMessage();
        waiting.push(msg);
        nudge();
      }
    } finally {
      received = false;
      nudge();
    }
  })();
  // Its failure is thrown once the messages in hand are settled (awaited below), not left unhandled meanwhile.
  receiving.catch(() => {});
  stopping.addEventListener('abort', nudge, { once: true });
  try {
    for (;;) {
      // Stopping: nothing more begins. Those received and not begun are left unsettled: they come again to the next
      // consumer once their ack wait runs out (given back with nak while this consumer's pull may still be open on
      // the server, they can be handed to that pull again and lost with it until then all the same).
      while (!stopping.aborted && waiting.length > 0 && inFlight.size < limit) {
        progressAt = Date.now();
        const p: Promise<void> = settle(opts, waiting.shift()!)
          .catch((err) => opts.logger.warn({ err: (err as Error).message }, `${opts.what} handling failed`))
          .finally(() => {
            progressAt = Date.now();
            inFlight.delete(p);
            nudge();
          });
        inFlight.add(p);
      }
      if (!received && (waiting.length === 0 || stopping.aborted)) break;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
    await Promise.all(inFlight);
    await receiving;
  } finally {
    clearInterval(keepAlive);
    stopping.removeEventListener('abort', nudge);
  }
}

/**
 * Decodes one message, lets the handler apply it, and settles it by the outcome, all in a consumer span (tracing on):
 * in the publisher's trace when the message carries one, else in a trace of its own, so that every line logged for
 * the message (the handler's, a malformed message's, a retry's) names a trace.
 */
function settle<T>(opts: DurableConsumerOptions<T>, msg: JsMsg): Promise<void> {
  return inSpanOf(
    messageTraceContext(msg.headers),
    `process ${msg.subject}`,
    { kind: 'consumer', tracer: opts.name, attributes: { 'messaging.destination.name': msg.subject }, untraced: 'new' },
    () => settleIn(opts, msg),
  );
}

async function settleIn<T>(opts: DurableConsumerOptions<T>, msg: JsMsg): Promise<void> {
  let body: T;
  try {
    body = opts.schema.parse(msg.json());
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, `malformed ${opts.what} dropped`);
    markSpanFailed(err);
    opts.onMalformed?.();
    msg.term();
    return;
  }
  let outcome: Settlement;
  try {
    outcome = await opts.handle(body, msg);
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, `${opts.what} failed; will retry`);
    markSpanFailed(err);
    outcome = 'retry';
  }
  if (outcome === 'retry' && msg.info.deliveryCount >= (opts.maxDeliver ?? DEFAULT_MAX_DELIVER)) {
    opts.logger.error(
      {
        subject: msg.subject,
        stream: msg.info.stream,
        stream_seq: msg.seq,
        deliveries: msg.info.deliveryCount,
      },
      `${opts.what} given up after ${msg.info.deliveryCount} deliveries; it stays in stream ${msg.info.stream} at ` +
        `sequence ${msg.seq} to be read and published again`,
    );
    opts.onGaveUp?.();
    msg.term(`given up after ${msg.info.deliveryCount} deliveries`);
  } else if (outcome === 'ack') msg.ack();
  else if (outcome === 'term') msg.term();
  else msg.nak(opts.retryDelayMs ?? 5_000);
}
