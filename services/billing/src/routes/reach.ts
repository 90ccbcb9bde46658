/**
 * Reach (domain/reach/): machines' daemons hold their connection here, and renters open streams into the workloads
 * they rent. Both are WebSockets (`@fastify/websocket`): every check runs before the upgrade, so a refused stream is
 * an ordinary answer with the contract's problem body.
 */
import { type App, AppError, callerOf, noBody, zBool, zInt } from '@gpu/common';
import type { FastifyRequest } from 'fastify';
import WebSocket from 'ws';
import { z } from 'zod';
import {
  bridge,
  CHANNEL_PROTOCOL,
  CHANNEL_PROTOCOLS,
  daemonNotConnected,
  type ReachRelay,
  reachTarget,
  tooManyStreams,
} from '../domain/reach/index.ts';
import type { RouteDeps } from './deps.ts';
import { problems } from './schemas.ts';

/** The header of a stream one instance passes to the instance holding its machine's connection (one hop only). */
const HOP = 'x-reach-hop';

const sessionParams = z.object({ sessionID: z.uuid() });

const argv = z
  .string()
  .min(1)
  .max(64 * 1024);
const execQuery = z.object({
  command: z
    .union([argv, z.array(argv).min(1).max(1024)])
    .transform((c) => (typeof c === 'string' ? [c] : c))
    .describe(
      'the program and its arguments, one `command` each (argv, never a shell string), as `kubectl exec` sends them',
    ),
  tty: zBool()
    .default(false)
    .describe('a terminal (PTY): its size from the resize channel, its output all on standard output'),
  stdin: zBool().default(true).describe('whether standard input is sent (false: the program reads an empty input)'),
  stdout: zBool().default(true).describe('accepted for kubectl; standard output is always sent'),
  stderr: zBool().default(true).describe('accepted for kubectl; standard error is always sent (without a terminal)'),
  cols: zInt(1, 1000).default(80).describe("the terminal's first width"),
  rows: zInt(1, 1000).default(24).describe("the terminal's first height"),
});

const daemonQuery = z.object({ provider_id: z.uuid().describe('the machine whose daemon connects') });

/** What the checks before the upgrade decided for the stream. */
type Plan =
  | {
      kind: 'local';
      channel: Awaited<ReturnType<ReachRelay['exec']>>;
      tty: boolean;
      /** How the relay ends it (the session ended): set once its WebSocket is open. */
      ends: { end: (reason: string) => void };
    }
  | { kind: 'forward'; upstream: Upstream };

/** The holder's socket, and what it sent before the renter's was there to take it. */
interface Upstream {
  socket: WebSocket;
  /** Sends what came and what comes to `to`. */
  pipeTo(to: WebSocket): void;
}

/** The answer of a WebSocket that refused to open, as the problem the holder gave. */
function refusal(status: number, body: string): AppError {
  let problem: { code?: string; detail?: string } = {};
  try {
    problem = JSON.parse(body) as typeof problem;
  } catch {
    // Not a problem body.
  }
  const kind =
    status === 404
      ? 'not_found'
      : status === 409
        ? 'conflict'
        : status === 429
          ? 'rate_limited'
          : status === 403
            ? 'forbidden'
            : 'unavailable';
  return new AppError(kind, problem.code ?? 'REACH_UNAVAILABLE', problem.detail ?? `the relay answered ${status}`);
}

/** Opens the stream at the instance holding the machine's connection (its own checks run there). */
function dialHolder(url: string, request: FastifyRequest, instanceId: string): Promise<Upstream> {
  const headers: Record<string, string> = { [HOP]: instanceId };
  if (request.headers.authorization) headers.authorization = request.headers.authorization;
  const correlation = request.headers['x-correlation-id'];
  if (typeof correlation === 'string') headers['x-correlation-id'] = correlation;
  const upstream = new WebSocket(url, [CHANNEL_PROTOCOL], { headers, maxPayload: 4 * 1024 * 1024 });
  // From the first moment: the program's first output may come with the upgrade's answer.
  const early: [WebSocket.RawData, boolean][] = [];
  let target: WebSocket | undefined;
  upstream.on('message', (data, binary) => {
    if (target) target.send(data, { binary });
    else early.push([data, binary]);
  });
  const piped: Upstream = {
    socket: upstream,
    pipeTo(to) {
      for (const [data, binary] of early.splice(0)) to.send(data, { binary });
      target = to;
    },
  };
  return new Promise((resolve, reject) => {
    upstream.once('open', () => resolve(piped));
    upstream.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += String(d);
      });
      res.on('end', () => reject(refusal(res.statusCode ?? 502, body)));
    });
    upstream.once('error', () =>
      reject(new AppError('unavailable', 'REACH_UNAVAILABLE', 'the relay instance holding the machine did not answer')),
    );
  });
}

/** Passes messages and the close both ways between the renter's socket and the holder's. */
function pipeSockets(a: WebSocket, upstream: Upstream): void {
  const b = upstream.socket;
  const close = (to: WebSocket, code: number, reason: Buffer) => {
    const sendable = code >= 1000 && code < 5000 && code !== 1005 && code !== 1006;
    if (to.readyState === WebSocket.OPEN) to.close(sendable ? code : 1011, reason);
    else to.terminate();
  };
  a.on('message', (data, binary) => b.send(data, { binary }));
  upstream.pipeTo(a);
  a.on('close', (code, reason) => close(b, code, reason));
  b.on('close', (code, reason) => close(a, code, reason));
  a.on('error', () => b.terminate());
  b.on('error', () => a.terminate());
}

/** The answer of a WebSocket that opened. */
const SWITCHING = noBody('Switching Protocols: the WebSocket is open');

/** A request to a WebSocket route that asks for no upgrade: 426 UPGRADE_REQUIRED. */
async function upgradeRequired(): Promise<never> {
  throw new AppError(
    'upgrade_required',
    'UPGRADE_REQUIRED',
    'this route opens a WebSocket: send the request as an upgrade (Upgrade: websocket)',
    { headers: { upgrade: 'websocket' } },
  );
}

export async function reachRoutes(app: App, deps: RouteDeps & { relay: ReachRelay }): Promise<void> {
  const { relay, billing: ctx, config } = deps;
  const plans = new WeakMap<FastifyRequest, Plan>();

  app.route({
    method: 'GET',
    url: '/api/v1/billing/reach/daemon',
    config: { roles: ['daemon'], timeoutMs: 0 },
    schema: {
      tags: ['reach'],
      operationId: 'connectDaemon',
      summary: "A machine's daemon holds its connection to the relay (WebSocket)",
      description:
        "Only the machine's own daemon (a daemon client of its owner; the one the machine is bound to, where it is " +
        'bound): 403 NOT_MACHINE_DAEMON otherwise, 404 for a machine the registry does not know. The WebSocket then ' +
        'carries SSH, the daemon its server and billing its client: each renter stream is one channel (docs/architecture.md, "Reach").',
      querystring: daemonQuery,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 426, 503) },
    },
    preHandler: async (request) => {
      const { provider_id: providerId } = request.query as z.infer<typeof daemonQuery>;
      const actor = callerOf(request);
      if (!ctx.providers) {
        throw new AppError(
          'unavailable',
          'REACH_UNAVAILABLE',
          'reach needs the provider registry (provider_registry.url)',
        );
      }
      const machine = await ctx.providers.provider(providerId, request.correlationId);
      if (!machine) throw new AppError('not_found', 'PROVIDER_NOT_FOUND', `provider ${providerId} not found`);
      const bound = machine.daemonClientId;
      if (
        actor.kind !== 'client' ||
        actor.actsFor !== machine.ownerId ||
        (bound !== null && actor.clientId !== bound)
      ) {
        throw new AppError(
          'forbidden',
          'NOT_MACHINE_DAEMON',
          `only the daemon of machine ${providerId} connects for it`,
        );
      }
    },
    handler: upgradeRequired,
    wsHandler: (socket, request) => {
      const { provider_id: providerId } = request.query as z.infer<typeof daemonQuery>;
      relay.attach(providerId, socket).catch((err: Error) => {
        request.log.warn({ err: err.message, provider_id: providerId }, 'reach: a daemon connection failed');
        socket.terminate();
      });
    },
  });

  app.route({
    method: 'GET',
    url: '/api/v1/billing/sessions/:sessionID/exec',
    config: { scope: 'connect', roles: ['renter', 'provider', 'admin'], timeoutMs: 0 },
    schema: {
      tags: ['reach'],
      operationId: 'execInWorkload',
      summary: "Runs a program in the session's running workload, its streams on a WebSocket (`gpu exec`, `gpu shell`)",
      description:
        `Kubernetes' exec channels (subprotocol \`${CHANNEL_PROTOCOL}\`, as \`kubectl exec\`): each binary message ` +
        "is a channel's byte and its data: 0 standard input, 1 output, 2 errors, 3 the end's status (a Kubernetes " +
        'Status: `Success`, or `Failure` with `NonZeroExitCode` and the code), 4 a terminal size ' +
        '`{"Width","Height"}`, 255 `[255, 0]` ends standard input. The program runs in the workload (its ' +
        "namespaces, user, variables, GPUs and limits), never on the machine. Only the session's renter (an API " +
        'key needs `connect`; `read` never opens one): 404 SESSION_NOT_FOUND for anyone else. 409 ' +
        'SESSION_NOT_ACTIVE, NO_WORKLOAD, WORKLOAD_NOT_RUNNING, DAEMON_NOT_CONNECTED; 429 TOO_MANY_STREAMS past ' +
        "`reach.max_streams_per_session`. A stream ends within `reach.check_interval` of its session's or " +
        "workload's end (status `Failure`, message `the session ended`).",
      params: sessionParams,
      querystring: execQuery,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 409, 426, 429, 503) },
    },
    preHandler: async (request) => {
      const { sessionID } = request.params as z.infer<typeof sessionParams>;
      const q = request.query as z.infer<typeof execQuery>;
      const target = await reachTarget(ctx, callerOf(request), sessionID);
      const link = relay.local(target.providerId);
      if (link) {
        // Counted from here, before anything is awaited: streams opened at once cannot all pass the bound.
        if (relay.openCount(sessionID) >= config.reach.max_streams_per_session) {
          throw tooManyStreams(sessionID, config.reach.max_streams_per_session);
        }
        const ends = { end: (_reason: string) => {} };
        const untrack = relay.track({ sessionId: sessionID, end: (reason) => ends.end(reason) });
        let channel: Awaited<ReturnType<ReachRelay['exec']>>;
        try {
          channel = await relay.exec(link, {
            sessionId: sessionID,
            argv: q.command,
            tty: q.tty ? { cols: q.cols, rows: q.rows } : null,
          });
        } catch (err) {
          untrack();
          request.log.warn({ err: (err as Error).message }, 'reach: the machine refused a channel');
          throw new AppError(
            'unavailable',
            'REACH_UNAVAILABLE',
            "the machine's connection did not take the stream: try again",
            {
              headers: { 'retry-after': '1' },
            },
          );
        }
        ends.end = () => channel.close();
        channel.once('close', untrack);
        if (!q.stdin) channel.end();
        // A renter gone before the upgrade completed leaves no program waiting on its input.
        request.raw.socket.once('close', () => channel.close());
        plans.set(request, { kind: 'local', channel, tty: q.tty, ends });
        return;
      }
      const holder = request.headers[HOP] ? null : await relay.elsewhere(target.providerId);
      if (!holder) throw daemonNotConnected(target.providerId);
      const upstream = await dialHolder(
        `${holder.url.replace(/^http/, 'ws')}${request.url}`,
        request,
        config.instance_id,
      );
      request.raw.socket.once('close', () => upstream.socket.terminate());
      plans.set(request, { kind: 'forward', upstream });
    },
    handler: upgradeRequired,
    wsHandler: (socket, request) => {
      const plan = plans.get(request);
      if (!plan) {
        socket.terminate();
        return;
      }
      if (plan.kind === 'forward') {
        pipeSockets(socket, plan.upstream);
        return;
      }
      const stream = bridge(socket, plan.channel, { tty: plan.tty });
      plan.ends.end = (reason) => stream.end(reason);
    },
  });
}

/** The WebSocket server's choice among the subprotocols a client offers (none offered: none). */
export function chooseProtocol(offered: Set<string>): string | false {
  return CHANNEL_PROTOCOLS.find((p) => offered.has(p)) ?? false;
}
