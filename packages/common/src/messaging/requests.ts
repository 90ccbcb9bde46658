/**
 * Requests over core NATS (not JetStream) served by a queue group of a service's instances, each message reaching one
 * of them: the registry's heartbeats and billing's usage reports from provider daemons. Messages are handled as they
 * come, any number at once (the service's own group commit batches their writes), one by one or a turn's messages
 * together (`handleBatch`); the answers leave together once per turn of the event loop, so that NATS writes them to
 * its socket in one go (answers sent one by one cost a socket write each). The service answers only on a reply subject
 * it accepts (a requester's own inbox), so that a message never makes it publish anywhere else.
 *
 * Why not a stream: a JetStream stream sends its acknowledgement to whatever reply subject the publisher names, and
 * nats-server does not check it against the publisher's permissions, so whoever may publish into a stream can have
 * the server publish onto any subject of the account (another machine's heartbeat subject, or a JetStream API
 * request: `{"stream":…,"seq":N}` on `$JS.API.STREAM.PURGE.<stream>` purges it up to N). Daemons therefore publish on
 * no subject a stream captures; what they send is answered by the service once applied, and resent over HTTP when not.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { CountsByKey, type Tally } from '../concurrency.ts';

/** A message taken, with what `read` read of it. */
export interface TakenMessage<T> {
  msg: Msg;
  read: T;
}

/**
 * How messages are handled: one at a time (`handle`), or those taken in one turn of the event loop together
 * (`handleBatch`: all a socket read delivered, and more under load; a service that writes them in one statement
 * spends no promise per message).
 */
type RequestHandling<T> =
  | {
      /**
       * Handles one message: its answer, or undefined for none (no reply subject, or one the service does not answer
       * on). Never rejects (a failure is an answer too).
       */
      handle(msg: Msg, read: T): Promise<object | undefined>;
      handleBatch?: never;
    }
  | {
      /**
       * Handles several messages: calls `settle(i, answer)` once for each, in any order, as soon as its answer (or
       * undefined: none) is known, so that one slow message holds up no other. A message not settled when the
       * returned promise settles is released unanswered.
       */
      handleBatch(taken: TakenMessage<T>[], settle: (index: number, answer: object | undefined) => void): Promise<void>;
      handle?: never;
    };

export type RequestServerOptions<T = undefined> = RequestServerBase<T> & RequestHandling<T>;

interface RequestServerBase<T> {
  connection: Pick<NatsConnection, 'subscribe' | 'flush'>;
  /** The subjects taken (wildcards allowed), all in one queue group. */
  subjects: string[];
  queue: string;
  /**
   * What the service reads of a message before anything else (the sender its subject names), read once per message
   * and given to `limit` and `handle`.
   */
  read?(msg: Msg): T;
  /**
   * At most `max` messages in hand at once: one more is not handled but answered with `busy(msg)` at once (undefined:
   * not answered), so that a flood holds a bounded amount of work and memory. With `perSender`, at most
   * `perSender.max` of them from one sender (`perSender.of(read)`: its key; undefined: counted only in `max`), so that
   * one sender's flood leaves room for the others. Default: no bound.
   */
  limit?: {
    max: number;
    perSender?: { max: number; of(read: T): string | undefined };
    busy(msg: Msg, read: T): object | undefined;
  };
  /** What a message is, in log lines: `heartbeat`. */
  what: string;
  logger: Logger;
}

export interface RequestServer {
  /**
   * Resolves once the server knows the subscriptions (a request sent after it reaches this instance), or after 5 s
   * (a connection that is reconnecting subscribes once back); never rejects.
   */
  ready: Promise<void>;
  /** Stops taking messages; resolves once those in hand are answered. */
  stop(): Promise<void>;
}

/**
 * Whether the subjects that name their sender, `<prefix>.<owner>.<client>.<id>`, may be taken as that sender's here:
 * the server enforces who may publish them (it admits only authenticated users: operator mode, `nats-auth.ts`), and
 * they are out of every JetStream stream (the module's doc says why they must be). Otherwise logs an error saying why
 * and answers false: the service then does not take them (its daemons' messages go over HTTP). A server that admits
 * anyone would let any client publish any owner's subjects. The streams are taken as out when JetStream cannot say.
 */
export async function trustsSubjects(connection: NatsConnection, prefix: string, logger: Logger): Promise<boolean> {
  if (connection.info?.auth_required !== true) {
    logger.error(
      { server: connection.getServer(), subject: `${prefix}.>` },
      'the NATS server admits clients without credentials, so anyone may publish on subjects that name a daemon: ' +
        "not taking daemons' messages there (run it in operator mode: pnpm nats-setup)",
    );
    return false;
  }
  const id = '00000000-0000-4000-8000-000000000000';
  const sample = `${prefix}.${id}.${id}.${id}`;
  const stream = await jetstreamManager(connection, { timeout: 5_000 })
    .then((jsm) => jsm.streams.find(sample))
    .catch(() => undefined);
  if (stream === undefined) return true;
  logger.error(
    { stream, subject: `${prefix}.>` },
    `JetStream stream ${stream} captures ${prefix}.>, where daemons publish: a stream acknowledges onto whatever reply ` +
      "subject the publisher names, so a daemon could make the server publish anywhere. Not taking daemons' " +
      'messages there until that stream captures them no more',
  );
  return false;
}

/** How long `stop()` lets the subscriptions drain (a connection that is reconnecting never finishes). */
const DRAIN_TIMEOUT_MS = 5_000;
/** How long `ready` waits for the server to confirm the subscriptions (one that is reconnecting subscribes later). */
const READY_TIMEOUT_MS = 5_000;

/** Subscribes in the queue group; messages flow until `stop()`. */
export function serveRequests<T = undefined>(opts: RequestServerOptions<T>): RequestServer {
  let inHand = 0;
  /** Messages in hand by sender (`limit.perSender`). */
  const bySender = new CountsByKey();
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
    const read = opts.read ? opts.read(msg) : (undefined as T);
    const sender = opts.limit?.perSender?.of(read);
    // The sender's tally, looked up once: the message gives it back when done.
    const tally = sender === undefined ? undefined : bySender.tally(sender);
    if (opts.limit && (inHand >= opts.limit.max || (tally?.n ?? 0) >= (opts.limit.perSender?.max ?? Infinity))) {
      const answer = opts.limit.busy(msg, read);
      if (answer !== undefined) queueAnswer(msg, answer);
      return;
    }
    inHand++;
    const held = tally && bySender.add(tally);
    if (opts.handleBatch) {
      if (taken.push({ msg, read, held }) === 1) setImmediate(handleTaken);
      return;
    }
    void opts
      .handle(msg, read)
      .then(
        (answer) => answer !== undefined && queueAnswer(msg, answer),
        // A handler's bug: logged, not answered (the sender's request times out and it sends again).
        (err: unknown) => opts.logger.error({ err, subject: msg.subject }, `handling a ${opts.what} failed`),
      )
      .finally(() => done(held));
  };
  /** Queues one answer; the queue leaves on the next turn. */
  const queueAnswer = (msg: Msg, answer: object) => {
    if (answers.push([msg, JSON.stringify(answer)]) === 1) setImmediate(sendAnswers);
  };
  /** One message handled: out of the counts (`held`: its sender's tally). */
  const done = (held: Tally | undefined) => {
    if (held) bySender.remove(held);
    if (--inHand === 0) drained?.();
  };
  /** The messages taken this turn, for `handleBatch`, each with its sender's tally. */
  let taken: (TakenMessage<T> & { held: Tally | undefined })[] = [];
  const handleTaken = () => {
    const batch = taken;
    taken = [];
    const settled = new Uint8Array(batch.length);
    const settle = (i: number, answer: object | undefined) => {
      const message = batch[i];
      if (!message || settled[i]) return;
      settled[i] = 1;
      try {
        if (answer !== undefined) queueAnswer(message.msg, answer);
      } catch (err) {
        opts.logger.error({ err, subject: message.msg.subject }, `answering a ${opts.what} failed`);
      }
      done(message.held);
    };
    void Promise.resolve()
      .then(() => opts.handleBatch!(batch, settle))
      // A handler's bug: logged; what it left unsettled is released unanswered (the senders' requests time out).
      .catch((err: unknown) => opts.logger.error({ err, messages: batch.length }, `handling ${opts.what}s failed`))
      .finally(() => {
        for (let i = 0; i < batch.length; i++) settle(i, undefined);
      });
  };
  const subscriptions: Subscription[] = opts.subjects.map((subject) =>
    opts.connection.subscribe(subject, { queue: opts.queue, callback: take }),
  );
  const ready = Promise.race([
    opts.connection.flush().catch(() => {}),
    new Promise<void>((resolve) => setTimeout(resolve, READY_TIMEOUT_MS).unref()),
  ]);
  return {
    ready,
    async stop() {
      const draining = Promise.all(subscriptions.map((s) => s.drain().catch(() => s.unsubscribe())));
      await Promise.race([draining, new Promise((resolve) => setTimeout(resolve, DRAIN_TIMEOUT_MS).unref())]);
      if (inHand > 0) await new Promise<void>((resolve) => (drained = resolve));
      sendAnswers();
    },
  };
}
