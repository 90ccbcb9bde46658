/**
 * Reach: renters' streams into the workloads they rent, relayed over their machines' outbound connections
 * (relay.ts): programs as Kubernetes' exec channels and forwarded ports as bytes (channels.ts), renters' own SSH
 * (ssh.ts), HTTP to a port (routes/reach-ports.ts). Who may open one and when (`reachTarget`).
 */
import { AppError, errors, type Logger, type Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { findWorkload, sessionsWithRunningWorkload } from '../../db/workload-repository.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import { isRunning, loadSession, RUNNING_STATUSES } from '../sessions/index.ts';

export { bridge, CHANNEL_PROTOCOL, CHANNEL_PROTOCOLS, joinRaw, pipeBytes } from './channels.ts';
export { ByteMeter, metered } from './meter.ts';
export {
  GRANT_COOKIE,
  MAX_GRANTS_PER_SESSION,
  makePortLink,
  PortGrants,
  purgeExpiredGrants,
  TICKET_PARAM,
} from './port-grants.ts';
export { credentialOf, DialUnsupported, type Link, ReachRelay, type StreamCredential } from './relay.ts';
export { HostKey, serveRenterSsh } from './ssh.ts';

/** What a renter's stream goes to: the session and its machine. */
export interface ReachTarget {
  sessionId: string;
  providerId: string;
}

/**
 * The session a stream may be opened into, for its renter alone (a user's own sign-in or their API key with
 * `connect`; never another user, an admin, a daemon or a service: 404, as for a session that does not exist), while
 * it runs (409 SESSION_NOT_ACTIVE) and its workload runs (409 NO_WORKLOAD, WORKLOAD_NOT_RUNNING).
 */
export async function reachTarget(ctx: BillingContext, actor: Principal, sessionId: string): Promise<ReachTarget> {
  const session = await loadSession(ctx.db, sessionId).catch((err: unknown) => {
    throw err instanceof AppError && err.code === 'SESSION_NOT_FOUND' ? billingErrors.sessionNotFound(sessionId) : err;
  });
  if (actor.kind !== 'user' || actor.subject !== session.user_id) throw billingErrors.sessionNotFound(sessionId);
  if (!isRunning(session)) throw billingErrors.sessionNotActive(sessionId, session.status);
  const workload = await findWorkload(ctx.db, sessionId);
  if (!workload) {
    throw errors.conflict(
      'NO_WORKLOAD',
      `session ${sessionId} runs no workload: there is nothing to reach (rent with an idle workload: \`gpu rent --idle\`)`,
    );
  }
  if (workload.state !== 'running') {
    throw new AppError(
      'conflict',
      'WORKLOAD_NOT_RUNNING',
      `the workload of session ${sessionId} is ${workload.state}, not running`,
      { extra: { workload_state: workload.state } },
    );
  }
  return { sessionId, providerId: session.provider_id };
}

/** 409 DAEMON_NOT_CONNECTED: the machine's daemon holds no connection to the relay. */
export const daemonNotConnected = (providerId: string) =>
  errors.conflict(
    'DAEMON_NOT_CONNECTED',
    `the daemon of machine ${providerId} holds no connection to the platform (it is restarting, or a daemon ` +
      'without reach, or reach is off in its settings): its workloads cannot be reached now',
  );

/** 429 TOO_MANY_STREAMS. */
export const tooManyStreams = (sessionId: string, max: number) =>
  new AppError('rate_limited', 'TOO_MANY_STREAMS', `session ${sessionId} has ${max} streams open, its most`, {
    headers: { 'retry-after': '1' },
    extra: { max_streams: max },
  });

/**
 * What a renter is answered for a channel the machine's connection did not take: the relay's own refusal as it is, any
 * other failure (the connection dropped meanwhile, ssh2's plain errors) 503 REACH_UNAVAILABLE, logged, never a 500.
 */
export function refusedChannel(log: Pick<Logger, 'warn'>, err: unknown): AppError {
  if (err instanceof AppError) return err;
  log.warn({ err: (err as Error)?.message }, 'reach: the machine refused a channel');
  return new AppError(
    'unavailable',
    'REACH_UNAVAILABLE',
    "the machine's connection did not take the stream: try again",
    {
      headers: { 'retry-after': '1' },
    },
  );
}

/** Which of the sessions still run, with a running workload. */
export async function liveSessions(db: Kysely<BillingDB>, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  return new Set(await sessionsWithRunningWorkload(db, ids, RUNNING_STATUSES));
}
