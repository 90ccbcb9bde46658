/**
 * HTTP to a port inside a rented workload, through the platform (a notebook's API, an inference server, a page):
 * `/api/v1/billing/sessions/{id}/ports/{port}/{path}` is `http://127.0.0.1:{port}/{path}` in the workload, its own
 * loopback. Each request rides one forwarded connection of the machine's (relay.ts `forward`), answered as the
 * workload's server answered: status, headers, body streamed both ways.
 *
 * - **Who:** the session's renter, by their sign-in or an API key with `connect`, in `Authorization` (never passed
 *   on: the workload, and the machine it runs on, never see the renter's credentials).
 * - **The path:** the prefix up to the port is taken off (the server sees `/{path}`; `X-Forwarded-Prefix` names what
 *   was taken, and a `Location` of the server's that starts with `/` gets it back), as servers with relative links
 *   expect (`python3 -m http.server`, TensorBoard). `X-Forwarded-For`, `-Host` and `-Proto` say who asked.
 * - Another instance holding the machine's connection: the request is passed to it (one hop), as streams are.
 * - **Upgrades** (a WebSocket: a notebook's kernels, a dashboard's live view): the request's head is written on the
 *   forwarded connection as it came (the prefix taken off, `Connection: Upgrade` and `Upgrade` kept), and from then
 *   on bytes pass both ways untouched, as nginx passes an upgrade on: the workload's server answers the handshake
 *   itself (101 with its subprotocol and extensions, or its refusal). Counted, limited and cut like any stream.
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type App, AppError, callerOf, errors, noBody, type Principal, zInt } from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import {
  credentialOf,
  daemonNotConnected,
  GRANT_COOKIE,
  type Link,
  metered,
  type PortGrants,
  type ReachRelay,
  reachTarget,
  refusedChannel,
  TICKET_PARAM,
  tooManyStreams,
} from '../domain/reach/index.ts';

import type { RouteDeps } from './deps.ts';
import { problems } from './schemas.ts';

const HOP = 'x-reach-hop';

/** What follows the port in the request's own (still encoded) target: the server's path and query. */
const RAW_REST = /^\/api\/v1\/billing\/sessions\/[^/?#]+\/ports\/[^/?#]+(\/[^#]*)?$/;

const portParams = z.object({
  sessionID: z.uuid(),
  port: zInt(1, 65535).describe('the port inside the workload (on its loopback)'),
  '*': z.string().max(8192).describe('the path on the workload\'s server (after the port; "" for its root)'),
});

/**
 * One request to a workload's port: where, as whom, and what its server is asked for. On the platform's path
 * (`/api/v1/billing/sessions/{id}/ports/{port}/...`) the prefix is taken off; on the port's own host
 * (`<session>-<port>.ports.<domain>`, port-grants.ts) nothing is, and the request is the server's as it came.
 */
interface PortRequest {
  sessionId: string;
  port: number;
  actor: Principal;
  /** The server's path and query, as sent (still encoded). */
  rest: string;
  /** The prefix taken off (the platform's path), or null on the port's own host. */
  prefix: string | null;
}

/** A port host's session and port: `<session>-<port>.ports.<domain>` (its port, if any, aside). */
const PORT_HOST =
  /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-([0-9]{1,5})\.ports\.[^:]+(:[0-9]{1,5})?$/i;

/** The session and port a `Host` header names, when it is a port host. */
function portHostOf(host: string | undefined): { sessionId: string; port: number } | null {
  const m = PORT_HOST.exec(host ?? '');
  if (!m) return null;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { sessionId: m[1]!.toLowerCase(), port } : null;
}

/** Where billing routes a request that came to a port host (every path there is the workload's: `rewriteUrl`). */
const PORT_HOST_ROUTE = '/api/v1/billing/port-host';

/** The path a request is routed by: a port host's under `PORT_HOST_ROUTE`, any other as it came. */
export function portHostRewrite(request: http.IncomingMessage): string {
  const url = request.url ?? '/';
  return portHostOf(request.headers.host) ? `${PORT_HOST_ROUTE}${url.startsWith('/') ? '' : '/'}${url}` : url;
}

/** The request's Cookie header without the platform's grant (the workload never sees it), or undefined when empty. */
function cookiesForWorkload(header: string | undefined): string | undefined {
  const kept = (header ?? '')
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c !== '' && !c.startsWith(`${GRANT_COOKIE}=`));
  return kept.length > 0 ? kept.join('; ') : undefined;
}

/** The values of the cookies named `name` in a Cookie header (a browser may send several: other paths, domains). */
function cookiesOf(header: string | undefined, name: string): string[] {
  const values: string[] = [];
  for (const part of (header ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at > 0 && part.slice(0, at).trim() === name) values.push(part.slice(at + 1).trim());
  }
  return values;
}

/**
 * The workload's `Set-Cookie` lines for the renter's browser, each held to the port's own host: a `Domain` attribute
 * is dropped (a cookie for the whole ports domain would reach every other workload's host), and a cookie named as
 * the platform's grant is not passed at all.
 */
function ownHostCookies(lines: string[]): string[] {
  return lines
    .filter((line) => line.slice(0, line.indexOf('=')).trim() !== GRANT_COOKIE)
    .map((line) =>
      line
        .split(';')
        .filter((attribute, i) => i === 0 || !/^\s*domain\s*=/i.test(attribute))
        .join(';'),
    );
}

/** Methods a page of another origin may send a renter's browser here with (a link followed: no change asked). */
const SAFE_METHODS = new Set(['GET', 'HEAD']);

/**
 * Whether a request came from a page of another origin (another workload's port host is one: the same site) with a
 * method that changes something, or for anything but a navigation: `Sec-Fetch-Site` says so where the browser sends
 * it, else `Origin` (which browsers send with every such method).
 */
function crossOriginChange(request: FastifyRequest): boolean {
  const site = request.headers['sec-fetch-site'];
  const safe = SAFE_METHODS.has(request.method);
  if (site === 'same-site' || site === 'cross-site') return !safe || request.headers['sec-fetch-mode'] !== 'navigate';
  if (site !== undefined || safe) return false;
  const origin = request.headers.origin;
  if (origin === undefined) return false;
  try {
    return new URL(origin).host !== request.headers.host;
  } catch {
    return true;
  }
}

/** Headers of one connection, never passed on (RFC 9110 §7.6.1), and the renter's credentials. */
const NOT_PASSED = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'authorization',
  'host',
]);

/** The request's headers for the workload's server (or the holder, which gets the credentials). */
function headersFor(request: FastifyRequest, p: PortRequest, toHolder: boolean): http.OutgoingHttpHeaders {
  const onHost = p.prefix === null;
  const named = String(request.headers.connection ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase());
  const out: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || NOT_PASSED.has(name) || named.includes(name) || name === HOP) continue;
    out[name] = value;
  }
  // On the port's own host the platform's credential is the grant's cookie: `Authorization` is the workload's own.
  if (onHost && request.headers.authorization) out.authorization = request.headers.authorization;
  if (toHolder) {
    if (request.headers['transfer-encoding'] && request.headers['content-length'] === undefined) {
      out['transfer-encoding'] = 'chunked';
    }
    if (request.headers.authorization) out.authorization = request.headers.authorization;
    // The holder routes a port host's request by its host, and checks its grant itself.
    if (onHost) out.host = request.headers.host;
    out[HOP] = '1';
    return out;
  }
  if (onHost) {
    const cookie = cookiesForWorkload(request.headers.cookie);
    if (cookie === undefined) delete out.cookie;
    else out.cookie = cookie;
  }
  // A body without a length keeps its chunks: without them a GET's or DELETE's body would run into the next request.
  if (request.headers['transfer-encoding'] && request.headers['content-length'] === undefined) {
    out['transfer-encoding'] = 'chunked';
  }
  out.host = request.headers.host ?? 'localhost';
  out['x-forwarded-for'] = [request.headers['x-forwarded-for'], request.ip].filter(Boolean).join(', ');
  out['x-forwarded-host'] = String(request.headers['x-forwarded-host'] ?? request.headers.host ?? '');
  out['x-forwarded-proto'] = String(request.headers['x-forwarded-proto'] ?? request.protocol);
  if (p.prefix !== null) out['x-forwarded-prefix'] = p.prefix;
  return out;
}

/** The server's answer headers for the renter: hop-by-hop ones dropped, a root-relative `Location` prefixed. */
function answerHeaders(res: http.IncomingMessage, prefix: string | null): Record<string, string | string[]> {
  const named = String(res.headers.connection ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase());
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined || NOT_PASSED.has(name) || named.includes(name)) continue;
    out[name] = name === 'set-cookie' ? ownHostCookies(Array.isArray(value) ? value : [value]) : value;
  }
  const location = res.headers.location;
  if (prefix !== null && location?.startsWith('/') && !location.startsWith('//')) out.location = prefix + location;
  return out;
}

/** The bytes that came after the upgrade request's head, as @fastify/websocket keeps them on the request. */
function headOf(raw: http.IncomingMessage): Buffer | undefined {
  const key = Object.getOwnPropertySymbols(raw).find((k) => k.description === 'ws-head');
  const head = key ? (raw as unknown as Record<symbol, unknown>)[key] : undefined;
  return Buffer.isBuffer(head) ? head : undefined;
}

/** An HTTP/1.1 request head: its request line and headers, then the empty line. */
function requestHead(method: string, target: string, headers: http.OutgoingHttpHeaders): string {
  const lines = [`${method} ${target} HTTP/1.1`];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${v}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

export async function reachPortRoutes(
  app: App,
  deps: RouteDeps & { relay: ReachRelay; grants: PortGrants },
): Promise<void> {
  const { relay, grants, billing: ctx, config } = deps;
  // Bodies pass through unread, whatever their type.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  /**
   * The machine's connection forwarded to the request's port, counted against its session's bound until `untrack`;
   * `ended` runs when the stream must end (its session or workload ended, its credential withdrawn), and the relay
   * adds what `bytes` says it carried to its workload's counts as it goes and at `untrack`.
   */
  const forwardTracked = async (
    p: PortRequest,
    link: Link,
    ended: (channel: Duplex | undefined) => void,
    bytes: () => { in: number; out: number },
  ): Promise<{ channel: Duplex; untrack: () => void }> => {
    const { sessionId: sessionID, port } = p;
    if (relay.openCount(sessionID) >= config.reach.max_streams_per_session) {
      throw tooManyStreams(sessionID, config.reach.max_streams_per_session);
    }
    let channel: Duplex | undefined;
    const untrack = relay.track({
      sessionId: sessionID,
      end: () => ended(channel),
      credential: credentialOf(p.actor),
      bytes,
    });
    try {
      channel = (await relay.forward(link, { sessionId: sessionID, port })) as unknown as Duplex;
    } catch (err) {
      untrack();
      throw refusedChannel(app.log, err);
    }
    return { channel, untrack };
  };

  const proxy = async (request: FastifyRequest, reply: FastifyReply, p: PortRequest) => {
    const { sessionId: sessionID, port, rest, prefix } = p;
    const target = await reachTarget(ctx, p.actor, sessionID);
    const link = relay.local(target.providerId);
    let connection: Duplex | null = null;
    let holderUrl: URL | null = null;
    let untrack = () => {};
    // Counted where the request meets the machine's connection (once, whichever instance it came through).
    let bytesIn = 0;
    let bytesOut = 0;
    if (link) {
      const opened = await forwardTracked(
        p,
        link,
        (channel) => channel?.destroy(),
        () => ({ in: bytesIn, out: bytesOut }),
      );
      connection = opened.channel;
      untrack = opened.untrack;
    } else {
      const holder = request.headers[HOP] ? null : await relay.elsewhere(target.providerId);
      if (!holder) throw daemonNotConnected(target.providerId);
      holderUrl = new URL(holder.url);
    }
    let finished = false;
    const done = () => {
      if (finished) return;
      finished = true;
      untrack();
      connection?.destroy();
    };
    let upstream: http.ClientRequest;
    try {
      upstream = http.request({
        method: request.method,
        ...(connection
          ? { path: rest || '/', createConnection: () => connection as never }
          : {
              host: holderUrl?.hostname,
              port: holderUrl?.port,
              // As sent (never resolved against a base: no `..` or `\\` turns it into another route there), on a
              // connection of its own (a request's body never runs into another's).
              path: prefix === null ? rest : request.raw.url,
              agent: false,
            }),
        headers: headersFor(request, p, connection === null),
      });
    } catch (err) {
      done();
      throw errors.badRequest('INVALID_PATH', `the path cannot be sent on: ${(err as Error).message}`);
    }
    // The renter gone before the answer was all sent: the request, its connection and its slot go too.
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) upstream.destroy();
      done();
    });
    request.raw.on('data', (d: Buffer) => {
      bytesIn += d.length;
    });
    // The session's bytes a second where its machine's connection is held (the holder meters a request passed on).
    const meter = connection ? relay.meter(sessionID) : null;
    // Piped, not pipelined: a failed request must not take the renter's connection before its answer is sent.
    (meter ? request.raw.pipe(metered(meter)) : request.raw).pipe(upstream);
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      upstream.once('response', resolve);
      upstream.once('error', (err) => {
        done();
        reject(
          new AppError(
            'dependency_failed',
            'PORT_NOT_ANSWERING',
            `the server on port ${port} in the workload did not answer: ${err.message}`,
            { callersOwn: true },
          ),
        );
      });
    });
    // A status HTTP has no place for (Node's client takes any three digits; an answer must be 100-599): no answer.
    const status = res.statusCode ?? 0;
    if (status < 100 || status > 599) {
      res.destroy();
      done();
      throw new AppError(
        'dependency_failed',
        'PORT_NOT_ANSWERING',
        `the server on port ${port} in the workload answered with status ${status}, which HTTP has not`,
        { callersOwn: true },
      );
    }
    res.on('data', (d: Buffer) => {
      bytesOut += d.length;
    });
    res.once('close', done);
    // The workload's server's answer, whatever its status and type (the checks of answers against the document skip it).
    (reply.raw as unknown as Record<symbol, unknown>)[Symbol.for('gpu.passed-through')] = true;
    reply.code(status).headers(answerHeaders(res, connection ? prefix : null));
    if (!meter) return reply.send(res);
    const body = metered(meter);
    pipeline(res, body).catch(() => upstream.destroy());
    return reply.send(body);
  };

  /**
   * An upgrade: checked as any request (the renter's session, running, its machine connected), then its head written
   * on the machine's forwarded connection (or on a connection to the instance holding it), then bytes both ways.
   */
  const tunnel = async (request: FastifyRequest, reply: FastifyReply, p: PortRequest) => {
    const { sessionId: sessionID, rest } = p;
    const target = await reachTarget(ctx, p.actor, sessionID);
    const socket = request.raw.socket;
    const link = relay.local(target.providerId);
    const headers = headersFor(request, p, link === undefined);
    headers.connection = 'Upgrade';
    headers.upgrade = request.headers.upgrade;
    let upstream: Duplex;
    let untrack = () => {};
    let bytesIn = 0;
    let bytesOut = 0;
    if (link) {
      const opened = await forwardTracked(
        p,
        link,
        (channel) => {
          channel?.destroy();
          socket.destroy();
        },
        () => ({ in: bytesIn, out: bytesOut }),
      );
      upstream = opened.channel;
      untrack = opened.untrack;
      upstream.write(requestHead(request.method, rest || '/', headers));
    } else {
      const holder = request.headers[HOP] ? null : await relay.elsewhere(target.providerId);
      if (!holder) throw daemonNotConnected(target.providerId);
      const at = new URL(holder.url);
      upstream = net.connect({ host: at.hostname, port: Number(at.port) });
      try {
        await once(upstream, 'connect');
      } catch (err) {
        upstream.destroy();
        throw new AppError(
          'unavailable',
          'REACH_UNAVAILABLE',
          `the instance holding the machine's connection did not answer: ${(err as Error).message}`,
          { headers: { 'retry-after': '5' } },
        );
      }
      if (p.prefix !== null) headers.host = at.host;
      upstream.write(requestHead(request.method, p.prefix === null ? rest : (request.raw.url ?? '/'), headers));
    }
    // From here on the socket is this route's: nothing more is answered on it by the framework.
    reply.hijack();
    let finished = false;
    const done = () => {
      if (finished) return;
      finished = true;
      untrack();
      upstream.destroy();
      socket.destroy();
    };
    socket.on('error', done);
    upstream.on('error', done);
    socket.once('close', done);
    upstream.once('close', done);
    const head = headOf(request.raw);
    if (head && head.length > 0) {
      bytesIn += head.length;
      upstream.write(head);
    }
    socket.on('data', (d: Buffer) => {
      bytesIn += d.length;
    });
    upstream.on('data', (d: Buffer) => {
      bytesOut += d.length;
    });
    // The session's bytes a second where its machine's connection is held (the holder meters a stream passed on).
    const meter = link ? relay.meter(sessionID) : null;
    const onward = (from: Duplex, to: Duplex) => pipeline(meter ? [from, metered(meter), to] : [from, to]).catch(done);
    void onward(socket, upstream);
    void onward(upstream, socket);
  };

  const schema = (method: string) => ({
    tags: ['reach'],
    operationId: `${method}WorkloadPort`,
    summary: `${method.toUpperCase()} to a port inside the session's running workload (HTTP through the platform)`,
    description:
      "Passed to `http://127.0.0.1:{port}/{path}` in the workload (its own loopback, never the machine's), the " +
      'prefix up to the port taken off (`X-Forwarded-Prefix` names it; a `Location` starting with `/` gets it back), ' +
      'and answered as the server answered it, streamed. The `Authorization` header is never passed on. Only the ' +
      "session's renter (an API key needs `connect`): 404 SESSION_NOT_FOUND for anyone else; 409 SESSION_NOT_ACTIVE, " +
      'NO_WORKLOAD, WORKLOAD_NOT_RUNNING, DAEMON_NOT_CONNECTED; 429 TOO_MANY_STREAMS; 502 PORT_NOT_LISTENING ' +
      '(nothing listens there), PORT_NOT_ANSWERING (the connection broke before an answer). Bytes are counted with ' +
      'the workload. A GET that asks for an upgrade (`Connection: Upgrade`: a WebSocket) is passed on as it came, and ' +
      "the workload's server answers it (101 and its subprotocol, then bytes both ways until either side closes, the " +
      'session ends or the key is revoked; or its refusal).',
    params: portParams,
    response: { ...problems(400, 401, 403, 404, 409, 429, 502, 503) },
  });

  /** A request on the platform's path: the caller's own credentials, the prefix taken off. */
  const onPath = (request: FastifyRequest): PortRequest => {
    const { sessionID, port } = request.params as z.infer<typeof portParams>;
    // The path as sent, still encoded (`%2F` stays one segment's, nothing resolved): what the server is asked for.
    const rest = RAW_REST.exec(request.raw.url ?? '')?.[1];
    if (rest === undefined) throw errors.badRequest('INVALID_PATH', 'the path after the port cannot be read');
    const prefix = `/api/v1/billing/sessions/${sessionID}/ports/${port}`;
    return { sessionId: sessionID, port, actor: callerOf(request), rest, prefix };
  };

  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const) {
    app.route({
      method,
      url: '/api/v1/billing/sessions/:sessionID/ports/:port/*',
      config: { scope: 'connect', roles: ['renter', 'provider', 'admin'], timeoutMs: 0, openapi: { wildcard: 'path' } },
      schema: schema(method.toLowerCase()),
      // An upgrade is tunnelled here, before the handler (which it never reaches: the socket is the tunnel's).
      ...(method === 'GET'
        ? { preHandler: async (request, reply) => (request.ws ? tunnel(request, reply, onPath(request)) : undefined) }
        : {}),
      handler: (request, reply) => proxy(request, reply, onPath(request)),
    });
  }

  /**
   * A request on a port's own host (`<session>-<port>.ports.<domain>`, which every gateway passes to billing as it
   * came): a link's ticket traded for the browser's cookie, or the cookie's grant checked, then the request is the
   * workload's server's, nothing taken off.
   */
  const onHost = async (request: FastifyRequest, reply: FastifyReply): Promise<PortRequest | null> => {
    const host = portHostOf(request.headers.host);
    // Routed here only from a port host (`portHostRewrite`): anywhere else this path is no route.
    if (!host || request.originalUrl === request.url) {
      throw errors.notFound('NOT_FOUND', `no route for ${request.method} ${request.url}`);
    }
    const rest = request.originalUrl;
    const query = rest.indexOf('?');
    const params = new URLSearchParams(query < 0 ? '' : rest.slice(query + 1));
    const ticket = params.get(TICKET_PARAM);
    if (ticket !== null && request.method === 'GET' && !request.ws) {
      const { cookie, expiresAt } = await grants.redeem(ticket, host);
      const secure = (request.headers['x-forwarded-proto'] ?? request.protocol) === 'https';
      // The same address without the ticket (the rest of the query as it came).
      const others =
        query < 0
          ? []
          : rest
              .slice(query + 1)
              .split('&')
              .filter((kv) => !kv.startsWith(`${TICKET_PARAM}=`));
      // On this host, whatever the link's path said: `//elsewhere` (or `/\\elsewhere`) is another host to a browser.
      const path = `/${(query < 0 ? rest : rest.slice(0, query)).replace(/^[/\\]+/, '')}`;
      reply
        .code(303)
        .header(
          'set-cookie',
          `${GRANT_COOKIE}=${cookie}; Path=/; Expires=${expiresAt.toUTCString()}; HttpOnly; SameSite=Lax${secure ? '; Secure' : ''}`,
        )
        .header('location', others.length > 0 ? `${path}?${others.join('&')}` : path)
        .header('cache-control', 'no-store')
        .header('referrer-policy', 'no-referrer');
      await reply.send();
      return null;
    }
    // Another site's page (another workload's port host is one: same site, another origin) may link here, never
    // send requests here with the renter's cookie: only links followed (GET, HEAD) come from elsewhere; a form's POST
    // is a navigation too, and the cookie (SameSite=Lax) goes with it from a sibling host.
    if (crossOriginChange(request)) {
      throw errors.forbidden(
        "a request from another origin's page to a workload's port is refused (only links to it are followed)",
        'CROSS_ORIGIN_REQUEST',
      );
    }
    const actor = await grants.actorOf(cookiesOf(request.headers.cookie, GRANT_COOKIE), host);
    return { sessionId: host.sessionId, port: host.port, actor, rest, prefix: null };
  };

  const hostSchema = (method: string) => ({
    tags: ['reach'],
    operationId: `${method}PortHost`,
    summary: `${method.toUpperCase()} on a workload port's own host (a browser's way in)`,
    description:
      'Served on `<session>-<port>.ports.<domain>` alone, at every path (`/{path}` there is this route: the gateways ' +
      "pass such hosts to billing as they came); elsewhere 404. A renter's link (`POST " +
      ".../sessions/{id}/port-links`) opens it: its one-time `gpu-port-ticket` is traded for a cookie of that host's " +
      '(`gpu_port_grant`, HttpOnly, SameSite=Lax) and the browser sent on without it (303). With the cookie, the ' +
      'request is passed to `http://127.0.0.1:{port}/{path}` in the workload as it came (the cookie taken out; the ' +
      "workload's own `Authorization` passed), WebSocket upgrades too. 401 PORT_LINK_INVALID (a link opened already " +
      'or expired), PORT_SIGN_IN_REQUIRED (no cookie, or its credential withdrawn); 403 CROSS_ORIGIN_REQUEST (a page ' +
      "of another origin's sending requests here with the cookie, a form's POST included: only links followed with " +
      "GET or HEAD); then as the platform's path to the port. The workload's `Set-Cookie` is kept to this host " +
      '(`Domain` dropped).',
    params: z.object({ '*': z.string().max(8192).describe("the path on the workload's server") }),
    response: {
      303: noBody("a link's ticket taken: the browser's cookie set (`Set-Cookie`), and the address without it"),
      ...problems(401, 403, 404, 409, 429, 502, 503),
    },
  });

  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const) {
    app.route({
      method,
      url: `${PORT_HOST_ROUTE}/*`,
      // The grant's cookie is checked here (not a token); the workload's server answers for CORS on its own host.
      config: {
        public: true,
        timeoutMs: 0,
        openapi: {
          wildcard: 'path',
          cookie: {
            name: GRANT_COOKIE,
            description:
              "A browser's grant on one workload port's own host, set when it opened its renter's link (`POST " +
              '/api/v1/billing/sessions/{sessionID}/port-links`)',
          },
        },
        ...({ cors: false } as object),
      },
      schema: hostSchema(method.toLowerCase()),
      ...(method === 'GET'
        ? {
            preHandler: async (request, reply) => {
              if (!request.ws) return;
              const p = await onHost(request, reply);
              if (p) await tunnel(request, reply, p);
            },
          }
        : {}),
      handler: async (request, reply) => {
        const p = await onHost(request, reply);
        if (p) return proxy(request, reply, p);
      },
    });
  }
}
