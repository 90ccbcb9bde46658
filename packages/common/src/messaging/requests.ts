/**
 * Requests over core NATS (not JetStream) served by a queue group of a service's instances, each message reaching one
 * of them: the registry's heartbeats and billing's usage reports from provider daemons. Messages are handled as they
 * come, any number at once (the service's own group commit batches their writes); the answers leave together once
 * per turn of the event loop, so that NATS writes them to its socket in one go (answers sent one by one cost a
 * socket write each). The service answers only on a reply subject it accepts (a requester's own inbox), so that a
 * message never makes it publish anywhere else.
 *
 * Why not a stream: a JetStream stream sends its acknowledgement to whatever reply subject the publisher names, and
 * nats-server does not check it against the publisher's permissions, so whoever may publish into a stream can have
 * the server publish onto any subject of the account (another machine's heartbeat subject, or a JetStream API
 * request: `{"stream":…,"seq":N}` on `$JS.API.STREAM.PURGE.<stream>` purges it up to N). Daemons therefore publish on
 * no subject a stream captures; what they send is answered by the service once applied, and resent over HTTP when not.
 */
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';

export interface RequestServerOptions {
  connection: Pick<NatsConnection, 'subscribe'>;
  /** The subjects taken (wildcards allowed), all in one queue group. */
  subjects: string[];
  queue: string;
  /**
   * Handles one message: its answer, or undefined for none (no reply subject, or one the service does not answer on).
   * Never rejects (a failure is an answer too).
   */
  handle(msg: Msg): Promise<object | undefined>;
  /**
   * At most `max` messages in hand at once: one more is not handled but answered with `busy(msg)` at once (undefined:
   * not answered), so that a flood holds a bounded amount of work and memory. Default: no bound.
   */
  limit?: { max: number; busy(msg: Msg): object | undefined };
  /** What a message is, in log lines: `heartbeat`. */
  what: string;
  logger: Logger;
}

export interface RequestServer {
  /** Stops taking messages; resolves once those in hand are answered. */
  stop(): Promise<void>;
}

/** How long `stop()` lets the subscriptions drain (a connection that is reconnecting never finishes). */
const DRAIN_TIMEOUT_MS = 5_000;

/** Subscribes in the queue group; messages flow until `stop()`. */
export function serveRequests(opts: RequestServerOptions): RequestServer {
  let inHand = 0;
  let drained: (() => void) | undefined;
  const answers: [Msg, string][] = [];
  const sendAnswers = () => {
    for (const [msg, answer] of answers.splice(0)) {
      try {
        msg.respond(answer);
      } catch (err) {
        // The connection closed or is draining: the sender's request times out, and it sends again.
        opts.logger.warn({ err: (err as Error).message }, `answering a ${opts.what} failed`);
      }
    }
  };
  const take = (err: Error | null, msg: Msg) => {
    if (err) {
      opts.logger.warn({ err: err.message }, `${opts.what} subscription error`);
      return;
    }
    if (opts.limit && inHand >= opts.limit.max) {
      const answer = opts.limit.busy(msg);
      if (answer !== undefined && answers.push([msg, JSON.stringify(answer)]) === 1) setImmediate(sendAnswers);
      return;
    }
    inHand++;
    void opts.handle(msg).then((answer) => {
      if (answer !== undefined && answers.push([msg, JSON.stringify(answer)]) === 1) setImmediate(sendAnswers);
      if (--inHand === 0) drained?.();
    });
  };
  const subscriptions: Subscription[] = opts.subjects.map((subject) =>
    opts.connection.subscribe(subject, { queue: opts.queue, callback: take }),
  );
  return {
    async stop() {
      const draining = Promise.all(subscriptions.map((s) => s.drain().catch(() => s.unsubscribe())));
      await Promise.race([draining, new Promise((resolve) => setTimeout(resolve, DRAIN_TIMEOUT_MS).unref())]);
      if (inHand > 0) await new Promise<void>((resolve) => (drained = resolve));
      sendAnswers();
    },
  };
}
