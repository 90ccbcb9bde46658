/**
 * Heartbeats over NATS: daemons publish each machine's heartbeat on `<heartbeats prefix>.<provider ID>` (core NATS,
 * not JetStream), and every registry instance subscribes in one queue group, so each heartbeat reaches one of them.
 * The body is the HTTP heartbeat's (`{gpu_metrics?}`, empty for none); the messages of a turn are applied together by
 * `RegistryService.heartbeatsEach`, the way HTTP's are, so they join the same group commit.
 *
 * Core NATS, because a heartbeat is a report of now: one that is lost (no instance up, a slow consumer) is replaced by
 * the next, and storing each in a stream would cost the NATS server and the acknowledgements more than the write.
 * A daemon that wants to know the heartbeat landed sends it as a request: the answer (on the message's reply subject,
 * when that is a requester's inbox, `_INBOX.`...: never another subject) is the JSON of one result of POST /providers/heartbeats (`status_code` 200 with the status before and after, or the status
 * of its problem); with no instance subscribed the daemon hears "no responders" and falls back to HTTP.
 *
 * **Subject identity** (`messaging.subject_identity`, for a NATS server in operator mode): a daemon holding the NATS
 * user auth issued it may publish only on `<prefix>.<owner ID>.<client ID>.<provider ID>`, which the server
 * enforces, so such a heartbeat needs no token: it is applied as that owner's daemon client's, and answered only on
 * that client's own inbox (`_INBOX.<client ID>.`).
 *
 * Access is as strict as over HTTP: the message carries its sender's access token in an `Authorization: Bearer
 * <token>` header, verified like a request's (the same JWKS and verified-token cache) as of now (a heartbeat is
 * never replayed later); the sender needs one of the roles that may manage machines and moves only its owner's
 * machines, a daemon those bound to it or to none (`writeScope`), an admin or a service any. An API key's token sends no heartbeat. Refused and malformed
 * messages are answered with their problem (when they ask for an answer) and counted in
 * `registry_heartbeat_messages_rejected_total{reason}`; nothing of theirs is written.
 */
import {
  AppError,
  errors,
  hasRole,
  isDaemonInbox,
  isRefusal,
  isUuid,
  type Logger,
  messageTraceContext,
  type NatsPublisher,
  type OpenSpan,
  type Principal,
  principalOf,
  serveRequests,
  startSpanOf,
  statusOf,
  subjectPrincipal,
  subjectSender,
  type TakenMessage,
  type TokenVerifier,
  toAppError,
  tracingOn,
  UNCHECKED_PRINCIPAL,
  verifyBearer,
} from '@gpu/common';
import type { Msg } from '@nats-io/transport-node';
import { Counter } from 'prom-client';
import { MANAGING_ROLES } from '../domain/access.ts';
import type { HeartbeatInput, RegistryService, StatusResult } from '../domain/registry-service.ts';
import { UnknownGpuIndex } from '../errors.ts';
import { heartbeatAnswered, heartbeatRefused, heartbeatSchema } from '../routes/schemas.ts';

/** The queue group every registry instance joins: each heartbeat goes to one of them. */
const HEARTBEAT_QUEUE = 'provider-registry';

export interface HeartbeatSubscriberOptions {
  connection: NatsPublisher['connection'];
  registry: RegistryService;
  /** Verifies each message's token; null only with access control switched off (every message is then trusted). */
  verifier: TokenVerifier | null;
  /** Subject prefix: heartbeats arrive on `<prefix>.<provider ID>`. */
  prefix: string;
  /** Also take `<prefix>.<owner ID>.<client ID>.<provider ID>` as that daemon client's (NATS enforces who sends it). */
  subjectIdentity?: boolean;
  /** Counts the heartbeats not applied, by reason (registered on the app before it is ready). */
  rejected: Counter<'reason'>;
  /** The most heartbeats one daemon client (a subject naming it) has in hand at once (`PER_CLIENT_IN_HAND`). */
  perClientInHand?: number;
  logger: Logger;
}

/**
 * The most heartbeats on subjects naming their sender that one daemon client has in hand at once; one more is
 * answered 503 OVERLOADED at once (or dropped, when published), so that one client's flood (its daemon's bug, or its
 * owner's doing) cannot fill the write queue every machine shares (20,000: registry-service.ts). A daemon beats each
 * of its machines every few seconds, a heartbeat is in hand for milliseconds: 2,000 is far beyond any daemon's.
 */
const PER_CLIENT_IN_HAND = 2_000;

/** A full share: one error for all (shedding load must cost next to nothing). */
const clientOverloaded = new AppError(
  'unavailable',
  'OVERLOADED',
  'this daemon client has too many heartbeats in hand: try again shortly',
  { headers: { 'retry-after': '1' } },
);

export interface HeartbeatSubscriber {
  /** Resolves once the NATS server knows the subscriptions (5 s at most: common's serveRequests). */
  ready: Promise<void>;
  /** Stops taking heartbeats; resolves once those in hand are answered. */
  stop(): Promise<void>;
}

type Reason = 'malformed' | 'unauthenticated' | 'forbidden' | 'refused' | 'overloaded' | 'failed';

const decoder = new TextDecoder();

/** The reason a heartbeat was not applied, for the counter. */
function reasonOf(err: AppError): Reason {
  if (err.code === 'OVERLOADED') return 'overloaded';
  if (!isRefusal(err)) return 'failed';
  const status = statusOf(err);
  if (status === 401) return 'unauthenticated';
  if (status === 403) return 'forbidden';
  if (status === 400) return 'malformed';
  return 'refused';
}

/** `registry_heartbeat_messages_rejected_total{reason}`, for the app to register before it is ready. */
export function heartbeatRejectionCounter(): Counter<'reason'> {
  return new Counter({
    name: 'registry_heartbeat_messages_rejected_total',
    help: 'NATS heartbeats not applied, by reason (malformed, unauthenticated, forbidden, refused, overloaded, failed)',
    labelNames: ['reason'] as const,
    registers: [],
  });
}

/**
 * Whether a heartbeat's reply subject is one to answer on: a requester's inbox (`_INBOX.`, NATS clients' default),
 * never another subject, so that a message cannot make the registry publish on the platform's own subjects.
 */
const answersTo = (reply: string | undefined): boolean => reply?.startsWith('_INBOX.') === true;

/** Subscribes (in the queue group); heartbeats flow until `stop()`. */
export function startHeartbeatSubscriber(opts: HeartbeatSubscriberOptions): HeartbeatSubscriber {
  const { rejected } = opts;

  /** The sender a heartbeat's subject names (with `subjectIdentity` only), parsed once per message. */
  type Named = ReturnType<typeof subjectSender>;

  /** The provider ID a heartbeat's subject names, and its sender when the subject names it too (`named`). */
  function subjectOf(subject: string, named: Named): { id: string; sender?: Principal } {
    const id = named?.id ?? subject.slice(opts.prefix.length + 1);
    if (!isUuid(id))
      throw errors.validation('the subject names no provider ID', [{ path: 'subject', message: 'not a UUID' }]);
    return named ? { id, sender: subjectPrincipal(named) } : { id };
  }

  /** The heartbeat a message carries from `sender`: refused (thrown) when the sender may not beat or the body is bad. */
  function beatOf(msg: Msg, id: string, sender: Principal): HeartbeatInput {
    if (sender.scopes) throw errors.forbidden('an API key sends no heartbeat', 'INSUFFICIENT_SCOPE');
    if (!sender.unchecked && !hasRole(sender, ...MANAGING_ROLES)) {
      throw errors.forbidden(`this action requires the role ${MANAGING_ROLES.join(' or ')}`, 'ROLE_REQUIRED');
    }
    if (msg.data.length === 0) return { actor: sender, id, metrics: [] };
    const text = decoder.decode(msg.data);
    let json: unknown = null;
    try {
      json = text.trim() === '' ? null : JSON.parse(text);
    } catch {
      throw errors.badRequest('MALFORMED_JSON', 'the heartbeat is not JSON');
    }
    const body = heartbeatSchema.safeParse(json);
    if (!body.success) {
      throw errors.validation(
        'invalid heartbeat',
        body.error.issues.map((i) => ({ path: ['body', ...i.path].join('.'), message: i.message })),
      );
    }
    return { actor: sender, id, metrics: body.data?.gpu_metrics ?? [] };
  }

  /** The sender a message's token names (verified as of now), or the unchecked one with access control off. */
  async function tokenSender(msg: Msg): Promise<Principal> {
    if (!opts.verifier) return UNCHECKED_PRINCIPAL;
    return principalOf(await verifyBearer(opts.verifier, msg.headers?.get('Authorization') || undefined));
  }

  /**
   * A refused heartbeat's answer (one result of POST /providers/heartbeats), counted by reason; failures logged, in the
   * message's trace when it has a span.
   */
  function refusal(msg: Msg, thrown: Error, span: OpenSpan | undefined): { answer: object; failed: boolean } {
    const err = toAppError(thrown instanceof UnknownGpuIndex ? thrown.at('body.gpu_metrics') : thrown);
    const reason = reasonOf(err);
    rejected.inc({ reason });
    if (reason === 'failed') {
      opts.logger.error({ err: thrown, subject: msg.subject, ...span?.logFields() }, 'heartbeat failed');
    }
    return { answer: heartbeatRefused(err), failed: reason === 'failed' };
  }

  /**
   * Applies the heartbeats of a turn: each is read and checked on its own (a refused one is answered with its problem,
   * and writes nothing); those whose subject names their sender join the group commit at once
   * (`RegistryService.heartbeatsEach`), one with a token as soon as its token is verified, and each is answered as
   * soon as its outcome is known. With tracing on, each gets a consumer span, in its sender's trace when the message
   * carries one, marked failed when the registry failed it (a refusal is an answer, as a 4xx is to a server span).
   */
  async function applyAll(
    taken: TakenMessage<Named>[],
    settle: (index: number, answer: object | undefined) => void,
  ): Promise<void> {
    // Spans only with tracing on: at the fleet's rate each message's name, attributes and options cost more than
    // the check.
    const spans = tracingOn()
      ? taken.map(({ msg }) =>
          startSpanOf(messageTraceContext(msg.headers), `process ${msg.subject}`, {
            kind: 'consumer',
            tracer: 'heartbeat subscriber',
            attributes: { 'messaging.destination.name': msg.subject },
            untraced: 'new',
          }),
        )
      : [];
    const finished = new Uint8Array(taken.length);
    const finish = (i: number, outcome: StatusResult | Error) => {
      const message = taken[i];
      if (!message || finished[i]) return;
      finished[i] = 1;
      // A refusal is counted (a failure logged) whether or not its sender asked for an answer.
      const refused = outcome instanceof Error ? refusal(message.msg, outcome, spans[i]) : undefined;
      spans[i]?.end(refused?.failed ? outcome : undefined);
      if (!answerTo(message.msg, message.read)) settle(i, undefined);
      else settle(i, refused ? refused.answer : heartbeatAnswered(outcome as StatusResult));
    };
    const write = (beats: HeartbeatInput[], places: number[]) =>
      opts.registry.heartbeatsEach(beats, (k, outcome) => finish(places[k]!, outcome));
    const named: HeartbeatInput[] = [];
    const places: number[] = [];
    const verifying: Promise<void>[] = [];
    taken.forEach(({ msg, read }, i) => {
      try {
        const { id, sender } = subjectOf(msg.subject, read);
        if (sender) {
          named.push(beatOf(msg, id, sender));
          places.push(i);
        } else
          verifying.push(
            tokenSender(msg)
              .then((verified) => write([beatOf(msg, id, verified)], [i]))
              .catch((err: Error) => finish(i, err)),
          );
      } catch (err) {
        finish(i, err as Error);
      }
    });
    await Promise.all([write(named, places), ...verifying]);
  }

  /** Where a heartbeat's answer may go: a requester's inbox; for a subject that names its sender, that client's own. */
  const answerTo = (msg: Msg, named: Named): boolean =>
    named ? isDaemonInbox(msg.reply, named.client) : answersTo(msg.reply);
  const server = serveRequests({
    connection: opts.connection,
    subjects: [`${opts.prefix}.*`, ...(opts.subjectIdentity ? [`${opts.prefix}.*.*.*`] : [])],
    queue: HEARTBEAT_QUEUE,
    what: 'heartbeat',
    logger: opts.logger,
    // One client's share of the heartbeats in hand (subjects naming their sender only; the write queue bounds all).
    // The sender a subject names (with `subjectIdentity` only), read once.
    read: (msg): Named => (opts.subjectIdentity ? subjectSender(opts.prefix, msg.subject) : undefined),
    limit: {
      max: Number.POSITIVE_INFINITY,
      perSender: { max: opts.perClientInHand ?? PER_CLIENT_IN_HAND, of: (named) => named?.client },
      busy: (msg, named) => {
        rejected.inc({ reason: 'overloaded' });
        return answerTo(msg, named) ? heartbeatRefused(clientOverloaded) : undefined;
      },
    },
    handleBatch: applyAll,
  });
  opts.logger.info(
    { subject: `${opts.prefix}.*`, subject_identity: opts.subjectIdentity === true, queue: HEARTBEAT_QUEUE },
    'taking heartbeats over NATS',
  );
  return server;
}
