/**
 * Request timeout: a request whose reply has not started within the limit is
 * answered 503 REQUEST_TIMEOUT. A route may set `config.timeoutMs` (0 turns the
 * limit off, for long object transfers that bound themselves).
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../errors.ts';
import { sendProblem } from './error-handler.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Overrides the service's request timeout for this route; 0 disables it. */
    timeoutMs?: number;
  }
  interface FastifyRequest {
    /** Aborted when the request times out or the client goes away. */
    abortSignal: AbortSignal;
  }
}

const timers = new WeakMap<object, { timer?: NodeJS.Timeout; controller: AbortController }>();

export const requestTimeout = fp(
  async (app: FastifyInstance, opts: { timeoutMs: number }) => {
    app.decorateRequest('abortSignal', null as unknown as AbortSignal);
    app.addHook('onRequest', async (request, reply) => {
      const controller = new AbortController();
      request.abortSignal = controller.signal;
      const limit = request.routeOptions.config?.timeoutMs ?? opts.timeoutMs;
      const entry: { timer?: NodeJS.Timeout; controller: AbortController } = { controller };
      timers.set(request, entry);
      reply.raw.on('close', () => {
        if (!reply.raw.writableFinished) controller.abort(new Error('client closed the connection'));
      });
      if (limit > 0) {
        entry.timer = setTimeout(() => {
          controller.abort(errors.timeout());
          if (reply.sent || reply.raw.headersSent) return;
          request.log.warn({ timeout_ms: limit }, 'request timed out');
          void sendProblem(request, reply, errors.timeout(`request did not finish within ${limit} ms`));
        }, limit);
        entry.timer.unref();
      }
    });
    app.addHook('onResponse', async (request) => {
      const entry = timers.get(request);
      if (entry?.timer) clearTimeout(entry.timer);
    });
  },
  { name: 'request-timeout' },
);
