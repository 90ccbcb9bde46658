/**
 * Usage updates over NATS, two ways in:
 *
 * - **A durable JetStream pull consumer** (common's `startDurableConsumer`; `billing-usage` on stream `BILLING_USAGE`
 *   by default, subjects `<usage prefix>.>`, explicit ack), shared by every billing instance (each message goes to
 *   one of them): one report a message on `<usage prefix>.<session_id>`, carrying its sender's access token in an
 *   `Authorization: Bearer <token>` header, verified like an HTTP request's (the same JWKS). The message ID is the
 *   payload's `message_id`, else its `Nats-Msg-Id` header, so a redelivery (or a re-publish) is applied once. A message
 *   without a valid token is rejected and counted (`billing_usage_messages_rejected_total{reason}`), never applied;
 *   malformed messages, rejected ones and updates for unknown or ended sessions are terminated and logged (never
 *   redelivered forever); other failures (the database away) are nak'ed and retried later.
 * - **Requests over core NATS** (`subjectIdentity`, a NATS server in operator mode): a daemon holding the NATS user
 *   auth issued it may publish only on `<usage_reports>.<owner ID>.<client ID>.<…>`, so such a request needs no token
 *   and is that daemon client's. It carries its machine's reports (`{reports: [...]}`, up to 256), each applied as if
 *   it came alone, and is answered, once applied, on that client's own inbox only: `{results: [{status, code?,
 *   detail?}]}` in order (201 applied, 200 a duplicate, else the status of its problem), or `{problem}` for a
 *   malformed request. Not a stream: nats-server sends a stream's acknowledgement to whatever reply subject the
 *   publisher names (@gpu/common's messaging/requests.ts), so daemons publish into none; a request not answered is
 *   sent again over HTTP by the daemon, and its reports' IDs keep it applied once.
 *
 * Either way the sender must be allowed to report the session (the provider owner's daemon, an admin or a service),
 * exactly as over HTTP, and the reports go to the same domain function (group commit: usage-updates.ts).
 */

import type { NatsPublisher, Principal, Settlement, TokenVerifier } from '@gpu/common';
import {
  CountsByKey,
  type DurableConsumer,
  inSpanOf,
  isDaemonInbox,
  isRefusal,
  type Logger,
  messageTraceContext,
  problemOf,
  type RequestServer,
  serveRequests,
  startDurableConsumer,
  statusOf,
  subjectPrincipal,
  subjectSender,
  toAppError,
  trustsSubjects,
} from '@gpu/common';
import type { JsMsg } from '@nats-io/jetstream';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { Counter } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import {
  applyUsageReport,
  toUsageUpdate,
  type UsageMessage,
  type UsageReportsRequest,
  usageMessageSchema,
  usageReportsRequestSchema,
} from '../domain/sessions/index.ts';
import { senderOf } from './message-sender.ts';

const USAGE_STREAM = 'BILLING_USAGE';
export const USAGE_CONSUMER = 'billing-usage';

export interface UsageConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  /** Metrics to expose on the app's registry (`app.metrics.registerMetric`). */
  metrics: Counter[];
  stop(): Promise<void>;
  /** For /health: resolves while messages can flow, rejects naming what is wrong (consumer deleted, ...). */
  check(): Promise<void>;
}

export interface UsageConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  /** Verifies each message's token; null only with access control switched off (every message is then trusted). */
  verifier: TokenVerifier | null;
  /** Subject prefix: messages arrive on `<prefix>.<session_id>`. */
  prefix: string;
  /**
   * Also take requests on `<reportsPrefix>.<owner ID>.<client ID>.<…>` as that daemon client's, with no token
   * (`messaging.subject_identity`: the NATS server enforced who published it).
   */
  subjectIdentity?: boolean;
  /** The prefix of daemons' usage requests (`messaging.subjects.usage_reports`); needed with `subjectIdentity`. */
  reportsPrefix?: string;
  logger: Logger;
  stream?: string;
  durable?: string;
  /** How long a delivered message waits for its ack before it is delivered again (default 30 s). */
  ackWaitMs?: number;
  /** Bounds on daemons' usage requests in hand (the defaults above `REQUEST_LIMITS`; tests set smaller ones). */
  requestLimits?: UsageRequestLimits;
  /**
   * How many messages may be in hand at once (default 512). They are applied in
   * batches of concurrent updates (domain/sessions/usage-updates.ts: group commit), so
   * this bounds the batch size rather than the database connections used.
   */
  concurrency?: number;
}

/** Starts consuming (common's durable consumer); resolves once the stream and the durable consumer exist. */
export async function startUsageConsumer(opts: UsageConsumerOptions): Promise<UsageConsumer> {
  const rejected = new Counter({
    name: 'billing_usage_messages_rejected_total',
    help: 'NATS usage messages rejected and never applied, by reason (malformed, unauthenticated, forbidden, refused, gave_up, overloaded)',
    labelNames: ['reason'] as const,
    registers: [],
  });
  const handling: Handling = { ...opts, rejected };
  const limit = opts.concurrency ?? 512;
  // Messages are applied concurrently (up to `limit`), grouped into few database transactions.
  const consumer = startDurableConsumer({
    connection: opts.connection,
    name: 'usage consumer',
    what: 'usage message',
    durable: opts.durable ?? USAGE_CONSUMER,
    filter: `${opts.prefix}.>`,
    stream: { ensure: opts.stream ?? USAGE_STREAM },
    ackWaitMs: opts.ackWaitMs ?? 30_000,
    maxDeliver: 20,
    batch: limit,
    concurrency: limit,
    schema: usageMessageSchema,
    handle: (body, msg) => handle(handling, body, msg),
    onMalformed: () => rejected.inc({ reason: 'malformed' }),
    onGaveUp: () => rejected.inc({ reason: 'gave_up' }),
    logger: opts.logger,
  });
  await consumer.ready;
  const requests =
    opts.subjectIdentity &&
    opts.reportsPrefix &&
    (await trustsSubjects(opts.connection as NatsConnection, opts.reportsPrefix, opts.logger))
      ? serveUsageRequests(handling, opts.reportsPrefix)
      : null;
  if (requests) {
    await requests.ready;
    opts.logger.info({ subject: `${opts.reportsPrefix}.*.*.*`, queue: USAGE_QUEUE }, 'taking usage requests over NATS');
  }
  return {
    ...consumer,
    metrics: [rejected],
    async stop() {
      await Promise.all([requests?.stop(), consumer.stop()]);
    },
  };
}

type Handling = UsageConsumerOptions & { rejected: Counter<'reason'> };

async function handle(opts: Handling, body: UsageMessage, msg: JsMsg): Promise<Settlement> {
  if (msg.subject.slice(opts.prefix.length + 1) !== body.session_id) {
    opts.logger.warn({ err: `subject ${msg.subject} names another session` }, 'malformed usage message dropped');
    opts.rejected.inc({ reason: 'malformed' });
    return 'term';
  }
  let sender: Principal;
  try {
    sender = await senderOf(opts, msg);
  } catch (err) {
    if (!isRefusal(err)) {
      // The JWKS could not be fetched: not the sender's fault, try again later.
      opts.logger.warn({ err: (err as Error).message }, 'usage message sender not verified; will retry');
      return 'retry';
    }
    opts.logger.warn({ code: err.code, subject: msg.subject }, 'unauthenticated usage message rejected');
    opts.rejected.inc({ reason: 'unauthenticated' });
    return 'term';
  }
  const correlationId = msg.headers?.get('X-Correlation-ID') || undefined;
  try {
    await applyUsageReport(opts.ctx, toUsageUpdate(body, msg.headers?.get('Nats-Msg-Id'), correlationId, sender));
    return 'ack';
  } catch (err) {
    // The database away: again later.
    if (!isRefusal(err)) throw err;
    opts.logger.info({ code: err.code, session_id: body.session_id }, 'usage report refused');
    opts.rejected.inc({ reason: err.kind === 'forbidden' ? 'forbidden' : 'refused' });
    return 'term';
  }
}

/** The queue group of billing's instances taking daemons' usage requests: each request reaches one of them. */
const USAGE_QUEUE = 'billing';

/**
 * The most usage requests, and reports in them, one instance holds at once, and of them from one daemon client; one
 * more is answered 503 at once (the daemon sends its reports over HTTP). 8,192 reports take well under a second to
 * apply, far within a daemon's wait. One client may hold half: a client flooding billing (its own daemon's bug, or
 * its owner's doing) leaves the other half to every other daemon.
 */
export interface UsageRequestLimits {
  requests: number;
  reports: number;
  perClientRequests: number;
  perClientReports: number;
}
const REQUEST_LIMITS: UsageRequestLimits = {
  requests: 1024,
  reports: 8192,
  perClientRequests: 512,
  perClientReports: 4096,
};

/** One report's outcome in the answer to a usage request. */
interface ReportResult {
  status: number;
  code?: string;
  detail?: string;
}

/** Daemons' usage requests on `<prefix>.<owner ID>.<client ID>.<…>` (the module's doc): applied, then answered. */
function serveUsageRequests(opts: Handling, prefix: string): RequestServer {
  const malformed = (detail: string) => {
    opts.rejected.inc({ reason: 'malformed' });
    return { problem: { status: 400, code: 'MALFORMED_USAGE_MESSAGE', detail } };
  };
  const busy = () => {
    opts.rejected.inc({ reason: 'overloaded' });
    return { problem: { status: 503, code: 'OVERLOADED', detail: 'billing has too many usage reports in hand' } };
  };
  const limits = opts.requestLimits ?? REQUEST_LIMITS;
  let reportsInHand = 0;
  /** Reports in hand by daemon client. */
  const clientReports = new CountsByKey();
  /** `named`: the sender the subject names (the subscription's shape; not a sender when its IDs are not UUIDs). */
  const apply = async (msg: Msg, named: ReturnType<typeof subjectSender>): Promise<object> => {
    if (!named) return malformed(`${msg.subject} names no sender`);
    let body: UsageReportsRequest;
    try {
      body = usageReportsRequestSchema.parse(msg.json());
    } catch (err) {
      return malformed(`not a usage request: ${(err as Error).message.slice(0, 500)}`);
    }
    const sender = subjectPrincipal(named);
    const correlationId = msg.headers?.get('X-Correlation-ID') || undefined;
    const n = body.reports.length;
    const client = clientReports.tally(named.client);
    if (reportsInHand + n > limits.reports || client.n + n > limits.perClientReports) return busy();
    reportsInHand += n;
    const held = clientReports.add(client, n);
    let settled: PromiseSettledResult<Awaited<ReturnType<typeof applyUsageReport>>>[];
    try {
      settled = await Promise.allSettled(
        body.reports.map((r) => applyUsageReport(opts.ctx, toUsageUpdate(r, undefined, correlationId, sender))),
      );
    } finally {
      reportsInHand -= n;
      clientReports.remove(held, n);
    }
    const results = settled.map((s, i): ReportResult => {
      if (s.status === 'fulfilled') return { status: s.value.duplicate ? 200 : 201 };
      const err = toAppError(s.reason);
      const status = statusOf(err);
      if (!isRefusal(err)) opts.logger.error({ err: s.reason, subject: msg.subject }, 'usage report failed');
      else {
        opts.logger.info({ code: err.code, session_id: body.reports[i]!.session_id }, 'usage report refused');
        opts.rejected.inc({ reason: err.kind === 'forbidden' ? 'forbidden' : 'refused' });
      }
      const { code, detail } = problemOf(err);
      return { status, code, detail };
    });
    return { results };
  };
  /** Only on the sending client's own inbox: a request never makes billing publish anywhere else. */
  const answering = (msg: Msg, answer: object, named: ReturnType<typeof subjectSender>): object | undefined =>
    named && isDaemonInbox(msg.reply, named.client) ? answer : undefined;
  return serveRequests({
    connection: opts.connection,
    subjects: [`${prefix}.*.*.*`],
    queue: USAGE_QUEUE,
    what: 'usage request',
    logger: opts.logger,
    // A flood holds a bounded amount of work, one client's half of it: past it, the daemon sends over HTTP.
    // The sender the subject names, read once.
    read: (msg) => subjectSender(prefix, msg.subject),
    limit: {
      max: limits.requests,
      perSender: { max: limits.perClientRequests, of: (named) => named?.client },
      busy: (msg, named) => answering(msg, busy(), named),
    },
    handle: async (msg, named) => {
      const answer = await inSpanOf(
        messageTraceContext(msg.headers),
        `process ${msg.subject}`,
        { kind: 'consumer', tracer: 'usage requests', attributes: { 'messaging.destination.name': msg.subject } },
        () => apply(msg, named),
      );
      return answering(msg, answer, named);
    },
  });
}
