/**
 * Reach (domain/reach/): machines' daemons hold their connection here, and renters open streams into the workloads
 * they rent. They are WebSockets (`@fastify/websocket`), and a forwarded port's bytes may instead take a raw byte
 * stream (`Upgrade: tcp`, @gpu/common/raw-upgrade: the daemon's dial-back always, a renter's port-forward where
 * asked): every check runs before the upgrade, so a refused stream is an ordinary answer with the contract's problem
 * body.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { type App, AppError, callerOf, durationMs, keepPinging, kindOfStatus, noBody, zBool, zInt } from '@gpu/common';
import { streamBytes } from '@gpu/common/byte-relay';
import { acceptRawUpgrade, isRawUpgrade, openRawUpgrade, RAW_UPGRADE, UpgradeRefused } from '@gpu/common/raw-upgrade';
import type { FastifyReply, FastifyRequest } from 'fastify';
import WebSocket from 'ws';
import { z } from 'zod';
import type { SshKeysOf } from '../adapters/auth-service.ts';
import {
  ByteMeter,
  bridge,
  CHANNEL_PROTOCOL,
  CHANNEL_PROTOCOLS,
  credentialOf,
  DialUnsupported,
  daemonNotConnected,
  type HostKey,
  joinRaw,
  type Link,
  pipeBytes,
  type ReachRelay,
  type ReachTarget,
  reachTarget,
  refusedChannel,
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
  cols: zInt(1, 1000).prefault(80).describe("the terminal's first width"),
  rows: zInt(1, 1000).prefault(24).describe("the terminal's first height"),
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
  /** How it takes a raw byte stream instead (`Upgrade: tcp`), where it can. */
  attachRaw?(socket: Duplex): { end(reason: string): void };
  abandon(): void;
}

/** How the relay ends a stream (the session ended), set once it is joined; joined, its own closing is its join's. */
interface StreamEnds {
  end: (reason: string) => void;
  attached: boolean;
}

/** What the checks before the upgrade decided for the stream. */
type Plan =
  | { kind: 'local'; opened: Opened; ends: StreamEnds }
  | { kind: 'forward'; upstream: Upstream; ends: StreamEnds }
  /** A raw byte stream passed to the holder: its own raw stream there. */
  | { kind: 'forward-raw'; upstream: Duplex; ends: StreamEnds };

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

/** What a stream passed to the holder carries of the renter's request: its credential, its correlation, the hop. */
function holderHeaders(request: FastifyRequest, instanceId: string): Record<string, string> {
  const headers: Record<string, string> = { [HOP]: instanceId };
  if (request.headers.authorization) headers.authorization = request.headers.authorization;
  const correlation = request.headers['x-correlation-id'];
  if (typeof correlation === 'string') headers['x-correlation-id'] = correlation;
  return headers;
}

/** Opens the stream at the instance holding the machine's connection (its own checks run there). */
function dialHolder(url: string, request: FastifyRequest, instanceId: string): Promise<Upstream> {
  const headers = holderHeaders(request, instanceId);
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

/** Opens the raw byte stream (`Upgrade: tcp`) at the instance holding the machine's connection (its checks run there). */
async function rawHolder(url: string, request: FastifyRequest, instanceId: string): Promise<Duplex> {
  try {
    return await openRawUpgrade(url, { headers: holderHeaders(request, instanceId), timeoutMs: 15_000 });
  } catch (err) {
    if (err instanceof UpgradeRefused) throw refusal(err.status, err.body);
    throw new AppError('unavailable', 'REACH_UNAVAILABLE', 'the relay instance holding the machine did not answer');
  }
}

/** Whether the request is an upgrade to a raw byte stream (an `Upgrade: tcp` that Node took as an upgrade). */
const rawUpgrade = (request: FastifyRequest): boolean => request.ws && isRawUpgrade(request.headers);

/** The bytes that came after an upgrade's request, as @fastify/websocket keeps them (under its symbol `ws-head`). */
function upgradeHead(raw: IncomingMessage): Buffer | undefined {
  const key = Object.getOwnPropertySymbols(raw).find((s) => s.description === 'ws-head');
  return key ? (raw as unknown as Record<symbol, Buffer | undefined>)[key] : undefined;
}

/** Takes the request's connection as a raw byte stream: the 101 written, the reply Fastify's no more. */
function switchToRaw(request: FastifyRequest, reply: FastifyReply): Duplex {
  reply.hijack();
  return acceptRawUpgrade(request.raw.socket, upgradeHead(request.raw));
}

/** A WebSocket route asked for a raw byte stream: 400 UPGRADE_NOT_SUPPORTED. */
const webSocketOnly = () =>
  new AppError(
    'invalid',
    'UPGRADE_NOT_SUPPORTED',
    'this route opens a WebSocket (Upgrade: websocket); only port-forward takes a raw byte stream (Upgrade: tcp)',
  );

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

/** The answer of a connection switched to a raw byte stream. */
const SWITCHED_RAW = noBody('Switching Protocols: the connection carries the bytes as they are (Upgrade: tcp)');

/** The answer of a connection switched to a raw byte stream or a WebSocket, as asked. */
const SWITCHED_EITHER = noBody('Switching Protocols: the raw byte stream (Upgrade: tcp) or the WebSocket is open');

/** A request to the dial-back route that asks for no raw byte stream: 426 UPGRADE_REQUIRED. */
const rawRequired = () =>
  new AppError(
    'upgrade_required',
    'UPGRADE_REQUIRED',
    'this route opens a raw byte stream: send the request as an upgrade (Connection: Upgrade, Upgrade: tcp)',
    { headers: { upgrade: RAW_UPGRADE } },
  );

/** A request to a stream's route that asks for no upgrade: 426 UPGRADE_REQUIRED (`takesRaw`: a raw stream too). */
const upgradeNeeded = (takesRaw = false) =>
  new AppError(
    'upgrade_required',
    'UPGRADE_REQUIRED',
    takesRaw
      ? 'this route opens a raw byte stream or a WebSocket: send the request as an upgrade (Upgrade: tcp, or websocket)'
      : 'this route opens a WebSocket: send the request as an upgrade (Upgrade: websocket)',
    { headers: { upgrade: takesRaw ? `${RAW_UPGRADE}, websocket` : 'websocket' } },
  );

/** The handler of a stream's route, which a request reaches only when it asks for no upgrade. */
async function upgradeRequired(): Promise<never> {
  throw upgradeNeeded();
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
    takesRaw = false,
  ): Promise<void> => {
    const raw = rawUpgrade(request);
    if (raw && !takesRaw) throw webSocketOnly();
    const { sessionID } = request.params as z.infer<typeof sessionParams>;
    const target = await reachTarget(ctx, callerOf(request), sessionID);
    // A plain request opens nothing (its caller told whether the stream would be theirs): only an upgrade gets as far
    // as the workload.
    if (!request.ws) throw upgradeNeeded(takesRaw);
    const link = relay.local(target.providerId);
    // Counted from here, before anything is awaited: streams opened at once cannot all pass the bound.
    if (link && relay.openCount(sessionID) >= config.reach.max_streams_per_session) {
      throw tooManyStreams(sessionID, config.reach.max_streams_per_session);
    }
    const socket = request.raw.socket;
    const ends: StreamEnds = { end: () => {}, attached: false };
    // Bytes are counted where the stream meets the machine's connection (once, whichever instance it came through).
    // (Through the socket that carries it once the relay took it over: @gpu/common/byte-relay.)
    const base = streamBytes(socket);
    const untrack = relay.track({
      sessionId: sessionID,
      end: (reason) => ends.end(reason),
      credential: credentialOf(callerOf(request)),
      bytes: link
        ? () => {
            const now = streamBytes(socket);
            return { in: now.read - base.read, out: now.written - base.written };
          }
        : undefined,
    });
    // The renter gone at any moment (before the upgrade completed too) leaves nothing open: listening from now on.
    // Once joined, the join passes the renter's going on (what was on its way to the machine written first).
    let giveUp = () => {};
    const gone = () => {
      if (!ends.attached) giveUp();
      untrack();
    };
    socket.once('close', gone);
    try {
      if (link) {
        const opened = await open(target, link);
        giveUp = () => opened.abandon();
        plans.set(request, { kind: 'local', opened, ends });
        protocolOf.set(request.raw, protocol);
      } else {
        const holder = request.headers[HOP] ? null : await relay.elsewhere(target.providerId);
        if (!holder) throw daemonNotConnected(target.providerId);
        if (raw) {
          const upstream = await rawHolder(`${holder.url}${request.url}`, request, config.instance_id);
          giveUp = () => upstream.destroy();
          plans.set(request, { kind: 'forward-raw', upstream, ends });
        } else {
          const url = `${holder.url.replace(/^http/, 'ws')}${request.url}`;
          const upstream = await dialHolder(url, request, config.instance_id);
          giveUp = () => upstream.socket.terminate();
          plans.set(request, { kind: 'forward', upstream, ends });
          protocolOf.set(request.raw, upstream.socket.protocol || false);
        }
      }
    } catch (err) {
      socket.off('close', gone);
      untrack();
      throw err;
    }
    // Gone while it was being opened: its 'close' came before there was anything to give up.
    if (socket.destroyed) gone();
  };

  /** A prepared stream's connection switched to a raw byte stream, joined to what was opened for it. */
  const attachRaw = (request: FastifyRequest, reply: FastifyReply): void => {
    const plan = plans.get(request);
    const socket = switchToRaw(request, reply);
    if (plan?.kind === 'forward-raw') {
      // The holder meters the session's bytes.
      const joined = joinRaw(socket, plan.upstream, new ByteMeter(0));
      plan.ends.end = (reason) => joined.end(reason);
      plan.ends.attached = true;
    } else if (plan?.kind === 'local' && plan.opened.attachRaw) {
      const stream = plan.opened.attachRaw(socket);
      plan.ends.end = (reason) => stream.end(reason);
      plan.ends.attached = true;
    } else {
      socket.destroy();
    }
  };

  /** The WebSocket of a prepared stream, joined to what was opened for it. */
  const attach = (socket: WebSocket, request: FastifyRequest) => {
    const plan = plans.get(request);
    if (!plan || plan.kind === 'forward-raw') {
      socket.terminate();
      return;
    }
    plan.ends.attached = true;
    // A renter gone without a word lets go of the stream's slot and its program within three intervals.
    keepPinging(socket, durationMs(config.reach.ping_interval));
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

  /** Daemons' dial-backs passed on to the instance holding their machine: ended when this instance stops. */
  const passing = new Set<Duplex>();
  app.addHook('preClose', (done) => {
    for (const socket of passing) socket.destroy();
    done();
  });

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
      summary: "A machine's daemon dials back with a forwarded port's connection (raw byte stream, `Upgrade: tcp`)",
      description:
        "The relay asks the machine's daemon over its connection (SSH subsystem `gpu-dial`) to connect to a port in a " +
        'workload and dial back here with the ticket it sent, an HTTP/1.1 upgrade to a raw byte stream ' +
        "(`Connection: Upgrade`, `Upgrade: tcp`, answered 101): the connection then carries the workload connection's " +
        "bytes as they are, joined to the renter's `port-forward` stream. Only the machine's own daemon (403 " +
        'NOT_MACHINE_DAEMON); 426 UPGRADE_REQUIRED without `Upgrade: tcp`; 404 DIAL_NOT_FOUND for a ticket no relay ' +
        'instance awaits from this machine (used, expired, or never sent).',
      querystring: dialQuery,
      response: { 101: SWITCHED_RAW, ...problems(400, 401, 403, 404, 426, 503) },
    },
    preHandler: async (request, reply) => {
      await assertMachineDaemon(request);
      if (!rawUpgrade(request)) throw rawRequired();
      const { provider_id: providerId, ticket } = request.query as z.infer<typeof dialQuery>;
      if (relay.awaitsDial(ticket, providerId)) {
        relay.dialled(ticket, switchToRaw(request, reply));
        return;
      }
      // Awaited by the instance holding the machine's connection, where the renter's stream is: one hop there.
      const holder = request.headers[HOP] ? null : await relay.elsewhere(providerId);
      if (!holder) {
        throw new AppError(
          'not_found',
          'DIAL_NOT_FOUND',
          'no relay awaits a dial-back with this ticket from this machine',
        );
      }
      const upstream = await rawHolder(`${holder.url}${request.url}`, request, config.instance_id);
      // The daemon went while the holder was asked: nothing to join.
      if (request.raw.socket.destroyed) {
        upstream.destroy();
        reply.hijack();
        return;
      }
      const socket = switchToRaw(request, reply);
      joinRaw(socket, upstream, new ByteMeter(0));
      for (const s of [socket, upstream]) {
        passing.add(s);
        s.once('close', () => passing.delete(s));
      }
    },
    handler: async () => {
      throw rawRequired();
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
              throw refusedChannel(request.log, err);
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
      summary:
        "A TCP connection to a port inside the session's running workload, as a raw byte stream or on a WebSocket " +
        '(`gpu port-forward`)',
      description:
        'One upgraded connection is one TCP connection to `127.0.0.1:<port>` in the workload (its own loopback, never ' +
        "the machine's). `Upgrade: tcp` (what `gpu port-forward` sends): after the 101 the connection carries its " +
        "bytes as they are, both ways, each side's end (FIN) passed on as the other's. `Upgrade: websocket`: every " +
        'binary message is bytes of the connection, both ways; the workload closing it ends the WebSocket with 1000, ' +
        'the renter closing the WebSocket ends it. The connection is made before the upgrade: 502 PORT_NOT_LISTENING ' +
        `when nothing listens there; 426 UPGRADE_REQUIRED without an upgrade. The exec and SSH streams answer ` +
        `\`Upgrade: tcp\` 400 UPGRADE_NOT_SUPPORTED. ${WHO}`,
      params: sessionParams,
      querystring: portQuery,
      response: { 101: SWITCHED_EITHER, ...problems(400, 401, 403, 404, 409, 426, 429, 502, 503) },
    },
    preHandler: async (request, reply) => {
      const { port } = request.query as z.infer<typeof portQuery>;
      await prepare(
        request,
        async (target, link) => {
          const to = { sessionId: target.sessionId, port };
          const meter = relay.meter(target.sessionId);
          // The daemon's dial-back; a daemon from before dial-backs: the connection as an SSH channel.
          const machine =
            (await relay.dial(link, to).catch((err: unknown) => {
              if (err instanceof DialUnsupported) return null;
              throw refusedChannel(request.log, err);
            })) ??
            (await relay.forward(link, to).catch((err: unknown) => {
              throw refusedChannel(request.log, err);
            }));
          return {
            attach: (socket) => pipeBytes(socket, machine, meter),
            attachRaw: (socket) => joinRaw(socket, machine, meter),
            abandon: () => machine.destroy(),
          };
        },
        false,
        true,
      );
      if (rawUpgrade(request)) attachRaw(request, reply);
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
