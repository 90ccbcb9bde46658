/**
 * Request and correlation IDs, the client IP, and the headers a service
 * forwards on its own outgoing calls.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import proxyaddr from 'proxy-addr';
import { viaGatewaySocket } from './gateway-socket.ts';

export const REQUEST_ID_HEADER = 'x-request-id';
export const CORRELATION_ID_HEADER = 'x-correlation-id';

const SANE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The header's value when it is a sane ID (no spaces or control characters, at most 128 characters). */
export function saneId(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return v !== undefined && SANE_ID.test(v) ? v : undefined;
}

type RawWithIds = IncomingMessage & { correlationId?: string };

/** Fastify `genReqId`: the caller's X-Request-ID when sane, else a new UUID. */
export function genReqId(raw: IncomingMessage): string {
  return saneId(raw.headers[REQUEST_ID_HEADER]) ?? randomUUID();
}

/** The correlation ID of a raw request, accepted from the caller or generated once. */
export function correlationIdOf(raw: IncomingMessage): string {
  const r = raw as RawWithIds;
  r.correlationId ??= saneId(raw.headers[CORRELATION_ID_HEADER]) ?? randomUUID();
  return r.correlationId;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Accepted from X-Correlation-ID or generated; echoed and forwarded. */
    correlationId: string;
    /** The real client address: X-Real-IP / X-Forwarded-For only from trusted proxies. */
    clientIp: string;
  }
}

/** Headers to put on every call this request makes to another service or message it publishes. */
export function forwardHeaders(request: FastifyRequest): Record<string, string> {
  return { [CORRELATION_ID_HEADER]: request.correlationId };
}

export const requestContext = fp(
  async (app: FastifyInstance, opts: { trustedProxies: boolean | string[] }) => {
    const trusted =
      opts.trustedProxies === true
        ? () => true
        : opts.trustedProxies === false
          ? () => false
          : proxyaddr.compile(opts.trustedProxies);
    app.decorateRequest('correlationId', '');
    app.decorateRequest('clientIp', '');
    // Hooks on every request are callback-style: an async hook costs a promise and a microtask turn each.
    app.addHook('onRequest', (request, reply, done) => {
      request.correlationId = correlationIdOf(request.raw);
      if (viaGatewaySocket(request.socket)) {
        // The gateway's own connection: the address it wrote (it replaces the caller's header with one address).
        request.clientIp = lastForwardedFor(request.headers['x-forwarded-for']) ?? LOCAL_ADDRESS;
      } else {
        // request.ip already honours X-Forwarded-For from trusted proxies (Fastify trustProxy);
        // X-Real-IP is taken only from a trusted peer that sent no X-Forwarded-For.
        const peer = request.socket.remoteAddress ?? '';
        const realIp =
          request.headers['x-forwarded-for'] === undefined && trusted(peer, 0)
            ? saneIp(request.headers['x-real-ip'])
            : undefined;
        request.clientIp = realIp ?? request.ip;
      }
      echoIds(request, reply);
      done();
    });
  },
  { name: 'request-context' },
);

/** Echoes the request and correlation IDs on the response. */
export function echoIds(request: FastifyRequest, reply: FastifyReply): void {
  reply.header(REQUEST_ID_HEADER, request.id);
  reply.header(CORRELATION_ID_HEADER, request.correlationId);
}

/** A Unix socket's peer is on this machine: the address of a gateway-socket request that names none. */
const LOCAL_ADDRESS = '127.0.0.1';

/** The last address of X-Forwarded-For (the one the nearest proxy wrote), when sane. */
function lastForwardedFor(value: string | string[] | undefined): string | undefined {
  const joined = Array.isArray(value) ? value.join(',') : value;
  return saneIp(joined?.split(',').at(-1));
}

function saneIp(value: string | string[] | undefined): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return v !== undefined && /^[0-9A-Fa-f:.]{2,45}$/.test(v.trim()) ? v.trim() : undefined;
}
