/**
 * Request timeout: a request whose reply has not started within the limit is
 * answered 503 REQUEST_TIMEOUT. A route may set `config.timeoutMs` (0 turns the
 * limit off, for long object transfers that bound themselves).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

/** Per request: its reply, its timer, and its abort controller once someone asked for the signal. */
interface TimeoutState {
  reply: FastifyReply;
  timer?: NodeJS.Timeout;
  controller?: AbortController;
  /** Why the request was aborted before anyone asked for the signal. */
  reason?: unknown;
  /** Whether it was answered 503 REQUEST_TIMEOUT (its handler may still be at work). */
  timedOut?: boolean;
}

const states = new WeakMap<object, TimeoutState>();

export const requestTimeout = fp(
  async (app: FastifyInstance, opts: { timeoutMs: number }) => {
    // The signal is made on first use: most routes never read it, and an AbortController per request costs.
    app.decorateRequest('abortSignal', {
      getter(this: FastifyRequest) {
        const state = states.get(this);
        if (!state) return AbortSignal.abort(new Error('request has no timeout state'));
        state.controller ??= signalFor(state);
        return state.controller.signal;
      },
    });
    app.addHook('onRequest', (request, reply, done) => {
      const state: TimeoutState = { reply };
      states.set(request, state);
      const limit = request.routeOptions.config?.timeoutMs ?? opts.timeoutMs;
      if (limit <= 0) return done();
      state.timer = setTimeout(() => {
        abort(state, errors.timeout());
        if (reply.sent || reply.raw.headersSent) return;
        state.timedOut = true;
        request.log.warn({ timeout_ms: limit }, 'request timed out');
        // The rest of a body still on its way would be read only to be thrown away: close the connection instead.
        if (!request.raw.complete) reply.header('connection', 'close');
        void sendProblem(request, reply, errors.timeout(`request did not finish within ${limit} ms`));
      }, limit);
      state.timer.unref();
      done();
    });
    app.addHook('onResponse', (request, _reply, done) => {
      const state = states.get(request);
      if (state?.timer) clearTimeout(state.timer);
      done();
    });
  },
  { name: 'request-timeout' },
);

/** Whether the request was answered 503 REQUEST_TIMEOUT while its handler was still at work. */
export function answeredTimeout(request: FastifyRequest): boolean {
  return states.get(request)?.timedOut === true;
}

/** The request's controller: aborted by the timeout (also one that already fired) or when the client goes away. */
function signalFor(state: TimeoutState): AbortController {
  const controller = new AbortController();
  const res = state.reply.raw;
  const clientGone = () => {
    if (!res.writableFinished) controller.abort(new Error('client closed the connection'));
  };
  if (state.reason !== undefined) controller.abort(state.reason);
  else if (res.destroyed) clientGone();
  else res.once('close', clientGone);
  return controller;
}

function abort(state: TimeoutState, reason: unknown): void {
  if (state.controller) state.controller.abort(reason);
  else state.reason ??= reason;
}
