/**
 * Reach (domain/reach/): machines' daemons hold their connection here, and renters open streams into the workloads
 * they rent. Both are WebSockets (`@fastify/websocket`): every check runs before the upgrade, so a refused stream is
 * an ordinary answer with the contract's problem body.
 */
import type { IncomingMessage } from 'node:http';
import { type App, AppError, callerOf, kindOfStatus, noBody, zBool, zInt } from '@gpu/common';
import type { FastifyRequest } from 'fastify';
import WebSocket from 'ws';
import { z } from 'zod';
import type { SshKeysOf } from '../adapters/auth-service.ts';
import {
  bridge,
  CHANNEL_PROTOCOL,
  CHANNEL_PROTOCOLS,
  credentialOf,
  DialUnsupported,
  daemonNotConnected,
  type HostKey,
  joinSockets,
  type Link,
  pipeBytes,
  type ReachRelay,
  type ReachTarget,
  reachTarget,
  serveRenterSsh,
  tooManyStreams,
} from '../domain/reach/index.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';

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

const portQuery = z.object({
  port: zInt(1, 65535).describe('the port inside the workload (on its loopback)'),
});

const hostKeyBody = z
  .object({
    public_key: z.string().describe('the key as a known_hosts line has it: `ecdsa-sha2-nistp256 AAAA...`'),
    fingerprint: z.string().describe('its SHA256 fingerprint, as `ssh` shows it: `SHA256:...`'),
  })
  .describe("The platform's SSH host key")
  .register(schemas, { id: 'SshHostKey' });

const daemonQuery = z.object({ provider_id: z.uuid().describe('the machine whose daemon connects') });

const dialQuery = daemonQuery.extend({
  ticket: z
    .string()
    .length(32)
    .regex(/^[A-Za-z0-9_-]{32}$/, 'expected the ticket the relay sent')
    .describe('the one-time ticket the relay sent with its `gpu-dial` request'),
});

/** A stream opened here, before its WebSocket is: how it takes the socket, or is given up (no upgrade came). */
interface Opened {
  attach(socket: WebSocket): { end(reason: string): void };
  abandon(): void;
}

/** What the checks before the upgrade decided for the stream. */
type Plan =
  | {
      kind: 'local';
      opened: Opened;
      /** How the relay ends it (the session ended): set once its WebSocket is open. */
      ends: { end: (reason: string) => void };
    }
  | { kind: 'forward'; upstream: Upstream; ends: { end: (reason: string) => void } };

/** The holder's socket, and what it sent before the renter's was there to take it. */
interface Upstream {
  socket: WebSocket;
  /** Sends what came and what comes to `to`. */
  pipeTo(to: WebSocket): void;
}

/** The subprotocol each upgrade takes, as decided before it (none: Kubernetes' channels where offered). */
const protocolOf = new WeakMap<IncomingMessage, string | false>();

/** The answer of a WebSocket that refused to open, as the problem the holder gave. */
function refusal(status: number, body: string): AppError {
  let problem: { code?: string; detail?: string } = {};
  try {
    problem = JSON.parse(body) as typeof problem;
  } catch {
    // Not a problem body.
  }
  const kind = status >= 400 && status < 600 ? kindOfStatus(status) : 'unavailable';
  return new AppError(kind, problem.code ?? 'REACH_UNAVAILABLE', problem.detail ?? `the relay answered ${status}`, {
    // Nothing listening on the renter's port is the renter's server's doing, as at the holder.
    callersOwn: problem.code === 'PORT_NOT_LISTENING',
  });
}

/** Opens the stream at the instance holding the machine's connection (its own checks run there). */
function dialHolder(url: string, request: FastifyRequest, instanceId: string): Promise<Upstream> {
  const headers: Record<string, string> = { [HOP]: instanceId };
  if (request.headers.authorization) headers.authorization = request.headers.authorization;
  const correlation = request.headers['x-correlation-id'];
  if (typeof correlation === 'string') headers['x-correlation-id'] = correlation;
  const offered = String(request.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  const upstream = new WebSocket(url, offered, { headers, maxPayload: 4 * 1024 * 1024 });
  // From the first moment: the program's first output may come with the upgrade's answer.
  const early: [WebSocket.RawData, boolean][] = [];
  let target: WebSocket | undefined;
  upstream.on('message', (data, binary) => {
    if (target) forward(data, binary, target, upstream);
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

/** The most a socket may have unsent before the one feeding it stops reading. */
const HIGH_WATER = 1024 * 1024;

/** Sends a message on `to`, pausing `from` until `to` has sent most of what waits (the slower side sets the pace). */
function forward(data: WebSocket.RawData, binary: boolean, to: WebSocket, from: WebSocket): void {
  to.send(data, { binary });
  if (to.bufferedAmount <= HIGH_WATER || from.isPaused) return;
  from.pause();
  const check = setInterval(() => {
    if (to.bufferedAmount <= HIGH_WATER / 2 || to.readyState !== WebSocket.OPEN) {
      clearInterval(check);
      from.resume();
    }
  }, 5);
}

/** Passes messages and the close both ways between the renter's socket and the holder's. */
function pipeSockets(a: WebSocket, upstream: Upstream): void {
  const b = upstream.socket;
  const close = (to: WebSocket, code: number, reason: Buffer) => {
    const sendable = code >= 1000 && code < 5000 && code !== 1005 && code !== 1006;
    if (to.readyState === WebSocket.OPEN) to.close(sendable ? code : 1011, reason);
    else to.terminate();
  };
  a.on('message', (data, binary) => forward(data, binary, b, a));
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

export async function reachRoutes(
  app: App,
  deps: RouteDeps & { relay: ReachRelay; hostKey: HostKey; sshKeys: SshKeysOf | null },
): Promise<void> {
  const { relay, billing: ctx, config } = deps;
  const plans = new WeakMap<FastifyRequest, Plan>();

  /**
   * The checks every renter stream passes (whose session, its state, the bound on streams), then `open` here when
   * this instance holds the machine's connection, else the stream passed to the instance that does.
   */
  const prepare = async (
    request: FastifyRequest,
    open: (target: ReachTarget, link: Link) => Promise<Opened>,
    protocol: string | false,
  ): Promise<void> => {
    const { sessionID } = request.params as z.infer<typeof sessionParams>;
    const target = await reachTarget(ctx, callerOf(request), sessionID);
    const link = relay.local(target.providerId);
    // Counted from here, before anything is awaited: streams opened at once cannot all pass the bound.
    if (link && relay.openCount(sessionID) >= config.reach.max_streams_per_session) {
      throw tooManyStreams(sessionID, config.reach.max_streams_per_session);
    }
    const raw = request.raw.socket;
    const ends = { end: (_reason: string) => {} };
    // Bytes are counted where the stream meets the machine's connection (once, whichever instance it came through).
    const base = { in: raw.bytesRead, out: raw.bytesWritten };
    const untrack = relay.track({
      sessionId: sessionID,
      end: (reason) => ends.end(reason),
      credential: credentialOf(callerOf(request)),
      bytes: link ? () => ({ in: raw.bytesRead - base.in, out: raw.bytesWritten - base.out }) : undefined,
    });
    // The renter gone at any moment (before the upgrade completed too) leaves nothing open: listening from now on.
    let giveUp = () => {};
    const gone = () => {
      giveUp();
      untrack();
    };
    raw.once('close', gone);
    try {
      if (link) {
        const opened = await open(target, link);
        giveUp = () => opened.abandon();
        plans.set(request, { kind: 'local', opened, ends });
        protocolOf.set(request.raw, protocol);
      } else {
        const holder = request.headers[HOP] ? null : await relay.elsewhere(target.providerId);
        if (!holder) throw daemonNotConnected(target.providerId);
        const url = `${holder.url.replace(/^http/, 'ws')}${request.url}`;
        const upstream = await dialHolder(url, request, config.instance_id);
        giveUp = () => upstream.socket.terminate();
        plans.set(request, { kind: 'forward', upstream, ends });
        protocolOf.set(request.raw, upstream.socket.protocol || false);
      }
    } catch (err) {
      raw.off('close', gone);
      untrack();
      throw err;
    }
    // Gone while it was being opened: its 'close' came before there was anything to give up.
    if (raw.destroyed) gone();
  };

  /** The WebSocket of a prepared stream, joined to what was opened for it. */
  const attach = (socket: WebSocket, request: FastifyRequest) => {
    const plan = plans.get(request);
    if (!plan) {
      socket.terminate();
      return;
    }
    if (plan.kind === 'forward') {
      pipeSockets(socket, plan.upstream);
      plan.ends.end = (reason) => {
        if (socket.readyState === WebSocket.OPEN) socket.close(1001, reason.slice(0, 120));
        plan.upstream.socket.terminate();
      };
      return;
    }
    const stream = plan.opened.attach(socket);
    plan.ends.end = (reason) => stream.end(reason);
  };

  /** The caller is the machine's own daemon (a daemon client of its owner; the one it is bound to, where it is). */
  const assertMachineDaemon = async (request: FastifyRequest): Promise<void> => {
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
    if (actor.kind !== 'client' || actor.actsFor !== machine.ownerId || (bound !== null && actor.clientId !== bound)) {
      throw new AppError('forbidden', 'NOT_MACHINE_DAEMON', `only the daemon of machine ${providerId} connects for it`);
    }
  };

  /** A channel the machine's connection did not take. */
  const refusedChannel = (request: FastifyRequest, err: unknown): AppError => {
    if (err instanceof AppError) return err;
    request.log.warn({ err: (err as Error).message }, 'reach: the machine refused a channel');
    return new AppError(
      'unavailable',
      'REACH_UNAVAILABLE',
      "the machine's connection did not take the stream: try again",
      {
        headers: { 'retry-after': '1' },
      },
    );
  };

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
      await assertMachineDaemon(request);
      protocolOf.set(request.raw, false);
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
    url: '/api/v1/billing/reach/dial',
    config: { roles: ['daemon'], timeoutMs: 0 },
    schema: {
      tags: ['reach'],
      operationId: 'dialBack',
      summary: "A machine's daemon dials back with a forwarded port's connection (WebSocket)",
      description:
        "The relay asks the machine's daemon over its connection (SSH subsystem `gpu-dial`) to connect to a port in a " +
        "workload and dial back here with the ticket it sent; the WebSocket then carries that connection's bytes, " +
        "joined to the renter's `port-forward` WebSocket. Only the machine's own daemon (403 NOT_MACHINE_DAEMON); " +
        '404 DIAL_NOT_FOUND for a ticket no relay instance awaits from this machine (used, expired, or never sent).',
      querystring: dialQuery,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 426, 503) },
    },
    preHandler: async (request) => {
      await assertMachineDaemon(request);
      const { provider_id: providerId, ticket } = request.query as z.infer<typeof dialQuery>;
      protocolOf.set(request.raw, false);
      if (relay.awaitsDial(ticket, providerId)) return;
      // Awaited by the instance holding the machine's connection, where the renter's stream is: one hop there.
      const holder = request.headers[HOP] ? null : await relay.elsewhere(providerId);
      if (!holder) {
        throw new AppError(
          'not_found',
          'DIAL_NOT_FOUND',
          'no relay awaits a dial-back with this ticket from this machine',
        );
      }
      const upstream = await dialHolder(
        `${holder.url.replace(/^http/, 'ws')}${request.url}`,
        request,
        config.instance_id,
      );
      plans.set(request, { kind: 'forward', upstream, ends: { end: () => {} } });
    },
    handler: upgradeRequired,
    wsHandler: (socket, request) => {
      const plan = plans.get(request);
      if (plan?.kind === 'forward') pipeSockets(socket, plan.upstream);
      else relay.dialled((request.query as z.infer<typeof dialQuery>).ticket, socket);
    },
  });

  const WHO =
    "Only the session's renter (an API key needs `connect`; `read` never opens one): 404 SESSION_NOT_FOUND for " +
    'anyone else. 409 SESSION_NOT_ACTIVE, NO_WORKLOAD, WORKLOAD_NOT_RUNNING, DAEMON_NOT_CONNECTED; 429 ' +
    'TOO_MANY_STREAMS past `reach.max_streams_per_session`. A stream ends within `reach.check_interval` of its ' +
    "session's or workload's end. Its bytes are counted with the workload (`reach.bytes_in`, `bytes_out`).";

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
        `namespaces, user, variables, GPUs and limits), never on the machine. ${WHO} An ended stream's status is ` +
        '`Failure`, message `the session ended`.',
      params: sessionParams,
      querystring: execQuery,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 409, 426, 429, 503) },
    },
    preHandler: async (request) => {
      const q = request.query as z.infer<typeof execQuery>;
      const offered = new Set(
        String(request.headers['sec-websocket-protocol'] ?? '')
          .split(',')
          .map((p) => p.trim()),
      );
      await prepare(
        request,
        async (target, link) => {
          const channel = await relay
            .exec(link, {
              sessionId: target.sessionId,
              argv: q.command,
              tty: q.tty ? { cols: q.cols, rows: q.rows } : null,
            })
            .catch((err: unknown) => {
              throw refusedChannel(request, err);
            });
          if (!q.stdin) channel.end();
          return {
            attach: (socket) => bridge(socket, channel, { tty: q.tty, meter: relay.meter(target.sessionId) }),
            abandon: () => channel.close(),
          };
        },
        CHANNEL_PROTOCOLS.find((p) => offered.has(p)) ?? false,
      );
    },
    handler: upgradeRequired,
    wsHandler: attach,
  });

  app.route({
    method: 'GET',
    url: '/api/v1/billing/sessions/:sessionID/port-forward',
    config: { scope: 'connect', roles: ['renter', 'provider', 'admin'], timeoutMs: 0 },
    schema: {
      tags: ['reach'],
      operationId: 'forwardPort',
      summary: "A TCP connection to a port inside the session's running workload, on a WebSocket (`gpu port-forward`)",
      description:
        'One WebSocket is one TCP connection to `127.0.0.1:<port>` in the workload (its own loopback, never the ' +
        "machine's): every binary message is bytes of the connection, both ways; the workload closing it ends the " +
        'WebSocket with 1000, the renter closing the WebSocket ends it. The connection is made before the upgrade: ' +
        `502 PORT_NOT_LISTENING when nothing listens there. ${WHO}`,
      params: sessionParams,
      querystring: portQuery,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 409, 426, 429, 502, 503) },
    },
    preHandler: async (request) => {
      const { port } = request.query as z.infer<typeof portQuery>;
      await prepare(
        request,
        async (target, link) => {
          const to = { sessionId: target.sessionId, port };
          const dialled = await relay.dial(link, to).catch((err: unknown) => {
            if (err instanceof DialUnsupported) return null;
            throw refusedChannel(request, err);
          });
          if (dialled) {
            return {
              attach: (socket) => joinSockets(socket, dialled, relay.meter(target.sessionId)),
              abandon: () => dialled.socket.terminate(),
            };
          }
          // A daemon from before dial-backs: the connection as an SSH channel.
          const channel = await relay.forward(link, to).catch((err: unknown) => {
            throw refusedChannel(request, err);
          });
          return {
            attach: (socket) => pipeBytes(socket, channel, relay.meter(target.sessionId)),
            abandon: () => channel.close(),
          };
        },
        false,
      );
    },
    handler: upgradeRequired,
    wsHandler: attach,
  });

  app.route({
    method: 'GET',
    url: '/api/v1/billing/sessions/:sessionID/ssh',
    config: { scope: 'connect', roles: ['renter', 'provider', 'admin'], timeoutMs: 0 },
    schema: {
      tags: ['reach'],
      operationId: 'sshIntoWorkload',
      summary: "An SSH connection into the session's running workload, on a WebSocket (`gpu ssh-proxy`, `ssh`, `scp`)",
      description:
        "Every binary message is bytes of an SSH connection to the platform's SSH server for this session (its host " +
        'key: `GET /api/v1/billing/reach/ssh-host-key`), which takes only a public key the renter registered with the ' +
        'auth service (`gpu ssh-key add`), any user name. A shell, commands, `sftp` (so `scp`), terminals, signals ' +
        "and `direct-tcpip` to the workload's loopback (`ssh -L`) run in the workload. " +
        `${WHO} 503 REACH_UNAVAILABLE without an auth service to ask for keys (one that cannot be reached accepts no key: ` +
        '`Permission denied (publickey)`).',
      params: sessionParams,
      response: { 101: SWITCHING, ...problems(400, 401, 403, 404, 409, 426, 429, 503) },
    },
    preHandler: async (request) => {
      const sshKeys = deps.sshKeys;
      if (!sshKeys) {
        throw new AppError(
          'unavailable',
          'REACH_UNAVAILABLE',
          "SSH needs the auth service, which holds renters' keys (provider_registry.auth_url)",
        );
      }
      await prepare(
        request,
        async (target, link) => {
          const hostKey = await deps.hostKey.privateKey();
          const keys = sshKeys(callerOf(request).subject, request.correlationId);
          // Asked at once, so that the connection does not wait; a failure refuses its keys.
          keys.catch((err: unknown) => request.log.warn({ err }, 'reach: reading SSH keys failed'));
          let connection: { end(reason: string): void } | undefined;
          return {
            attach: (socket) => {
              connection = serveRenterSsh(
                socket,
                { sessionId: target.sessionId, link },
                {
                  relay,
                  hostKey,
                  keys,
                  logger: deps.logger,
                  admit: (end) =>
                    relay.openCount(target.sessionId) >= config.reach.max_streams_per_session
                      ? null
                      : relay.track({ sessionId: target.sessionId, end, credential: credentialOf(callerOf(request)) }),
                  meter: relay.meter(target.sessionId),
                },
              );
              return connection;
            },
            abandon: () => connection?.end('gone'),
          };
        },
        false,
      );
    },
    handler: upgradeRequired,
    wsHandler: attach,
  });

  app.get(
    '/api/v1/billing/reach/ssh-host-key',
    {
      config: { public: true },
      schema: {
        tags: ['reach'],
        operationId: 'getSshHostKey',
        summary: "The platform's SSH host key, for renters' known_hosts (`gpu ssh-config`)",
        description:
          'The same on every instance (`reach.ssh_host_key`, else one made once and kept). `public_key` is a ' +
          'known_hosts key (`ecdsa-sha2-nistp256 AAAA...`), `fingerprint` its SHA256 fingerprint as `ssh` shows it.',
        response: { 200: hostKeyBody, ...problems(503) },
      },
    },
    async () => {
      const key = await deps.hostKey.publicKey();
      return { public_key: key.publicKey, fingerprint: key.fingerprint };
    },
  );
}

/** The WebSocket server's choice among the subprotocols a client offers, as its route decided before the upgrade. */
export function chooseProtocol(offered: Set<string>, request: IncomingMessage): string | false {
  const chosen = protocolOf.get(request);
  if (chosen === undefined) return CHANNEL_PROTOCOLS.find((p) => offered.has(p)) ?? false;
  return chosen !== false && offered.has(chosen) ? chosen : false;
}
