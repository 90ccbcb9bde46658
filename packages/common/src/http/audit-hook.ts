/**
 * The audit trail of routes that move money or change who gets it: a route names its action in its config
 *
 *   app.post('/api/v1/wallet/:walletID/withdraw', { config: { audit: { action: 'withdrawal', body: ['amount'] } } })
 *
 * and every answer of it, allowed or refused, is appended to the service's `audit_events` (db/audit-trail.ts) once
 * its response closes (sent, or its client gone first): who (the token's subject, kind and API key), from where, in
 * which request, what (the route's first path parameter as the target, the body fields named of a body its schema
 * accepted, the answer's `id`, `status` or problem `code`; all as text PostgreSQL stores, none longer than 512
 * characters) and the outcome (2xx/3xx succeeded, 4xx refused, 5xx failed).
 *
 * Write-ahead: before the handler runs (once the access check and the schema let the request through), a `requested`
 * event with who, from where, the target and the named body fields is appended and awaited; the handler does not run
 * unless it is in the trail (an append that fails answers the request's error, 503 when the database is away). Every
 * later event of the request names it (`details.requested`: its ID, not the caller's request ID, which the caller
 * picks; an answer sent while the append was under way, a timeout's, waits for it). So a crash between the handler's
 * commit and its answer's event leaves a `requested` event that nothing names: the action may have happened, the
 * ledger says whether. A route that moves nothing and must not wait for the trail (the payout pause) opts out
 * (`ahead: false`). A request answered 503 REQUEST_TIMEOUT
 * while its handler was at work gets a second event once the handler is done (`details.after_timeout`), with what it
 * did. A request the access check
 * refused before the handler is recorded too. The service's close waits for the appends under way (`auditAppended`)
 * before its database closes.
 * A machine client acting for a user (a provider's daemon) is named with `details.acting_for`, the user; an admin or a
 * platform service acting on someone's wallet or machine is the actor beside a target that is not theirs.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Kysely } from 'kysely';
import { type AuditOutcome, appendAudit, auditActor } from '../db/audit-trail.ts';
import { toAppError } from './error-handler.ts';
import { problemOf } from './problem.ts';
import { answeredTimeout } from './timeout.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Append every answer of this route to the audit trail (http/audit-hook.ts), after a `requested` event written
     * before its handler runs; `ahead: false`, no such event (a route that moves nothing and must not wait for the
     * trail: the payout pause).
     */
    audit?: { action: string; body?: readonly string[]; ahead?: boolean };
  }
  interface FastifyInstance {
    /**
     * Resolves once every event of an answer already sent is appended (or failed): the service's close calls it before
     * its database closes, so an answer sent during the shutdown is not left out of the trail. Only on an app with the
     * audit hook registered.
     */
    auditAppended?(): Promise<void>;
  }
}

/** What of an answer's body the trail keeps. */
const ANSWER_FIELDS = ['id', 'status', 'code'] as const;

function outcomeOf(status: number): AuditOutcome {
  if (status >= 500) return 'failed';
  return status >= 400 ? 'refused' : 'succeeded';
}

/** The most characters of one text the trail keeps (the request's own limits are lower for every field it names). */
const MAX_TEXT = 512;

/**
 * Text as the trail can keep it, whatever the request held: no NUL (PostgreSQL stores none), no lone surrogate (jsonb
 * refuses one), at most `MAX_TEXT` characters. A refused request's path is not checked before it is recorded.
 */
function storable(text: string): string {
  // Cut first (a cut may split a surrogate pair), then made well-formed; the ellipsis within the limit.
  const cut = text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT - 1)}…` : text;
  return cut.replaceAll('\u0000', '\ufffd').toWellFormed();
}

/** `walletID: 5b…` → `wallet:5b…`: the first path parameter names what was acted on. */
function targetOf(params: unknown): string | null {
  const [entry] = Object.entries((params ?? {}) as Record<string, unknown>);
  if (!entry) return null;
  const [name, value] = entry;
  return storable(`${name.replace(/I[Dd]$|_id$/, '').toLowerCase()}:${String(value)}`);
}

/**
 * The body fields the route names, of a body its schema accepted (a request refused before its handler keeps none:
 * what it sent was not checked); text kept storable, anything else as JSON no longer than `MAX_TEXT`.
 */
function picked(body: unknown, fields: readonly string[] | undefined): Record<string, unknown> {
  if (!fields || !body || typeof body !== 'object') return {};
  const b = body as Record<string, unknown>;
  const keep = (v: unknown): unknown => {
    if (typeof v === 'string') return storable(v);
    const json = JSON.stringify(v);
    return json === undefined || json.length <= MAX_TEXT ? v : storable(json);
  };
  return Object.fromEntries(fields.filter((f) => b[f] !== undefined).map((f) => [f, keep(b[f])]));
}

/** The answer's fields the trail keeps, from a JSON body (nothing from another). */
function answerOf(payload: unknown): Record<string, unknown> {
  if (typeof payload !== 'string' || payload.length > 65_536) return {};
  try {
    return answerFields(JSON.parse(payload));
  } catch {
    return {}; // Not JSON: nothing of it is kept.
  }
}

/** The fields the trail keeps of an answer's body (a handler's value, or the JSON sent). */
function answerFields(body: unknown): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return {};
  const b = body as Record<string, unknown>;
  const kept = ANSWER_FIELDS.filter((f) => typeof b[f] === 'string' || typeof b[f] === 'number');
  return Object.fromEntries(kept.map((f) => [f, typeof b[f] === 'string' ? storable(b[f]) : b[f]]));
}

export const auditHook = fp(
  async (app: FastifyInstance, opts: { db: Kysely<never> }) => {
    const pending = new Set<Promise<void>>();
    app.decorate('auditAppended', async () => {
      await Promise.all(pending);
    });
    // The named body fields, once the route's schema accepted the body (preHandler runs after validation).
    const fieldsOf = new WeakMap<FastifyRequest, Record<string, unknown>>();
    // The ID its `requested` event will have once it is in the trail (undefined: its append failed), for the request
    // while it is being appended: an answer sent meanwhile (a request timed out while the append waited for the
    // trail's lock) names it all the same, once it is there.
    const requestedOf = new WeakMap<FastifyRequest, Promise<string | undefined>>();
    /**
     * The request's event: who, from where, to what, its outcome and `details` (`status_code` first, the `requested`
     * event it follows last, where nothing the caller sent can stand in for it).
     */
    const eventOf = (
      request: FastifyRequest,
      action: string,
      outcome: AuditOutcome,
      answer: Record<string, unknown>,
      requested?: string,
    ) => {
      const p = request.principal;
      const { status_code, ...rest } = answer;
      return {
        action,
        outcome,
        actor: p && !p.unchecked ? auditActor(p) : null,
        address: request.clientIp,
        target: targetOf(request.params),
        details: {
          ...(status_code !== undefined ? { status_code } : {}),
          ...(p?.actsFor !== undefined && p.actsFor !== p.subject ? { acting_for: p.actsFor } : {}),
          ...fieldsOf.get(request),
          ...rest,
          ...(requested !== undefined ? { requested } : {}),
        },
        requestId: String(request.id),
      };
    };
    app.addHook('preHandler', async (request: FastifyRequest) => {
      const audit = request.routeOptions.config?.audit;
      if (!audit) return;
      fieldsOf.set(request, picked(request.body, audit.body));
      if (audit.ahead === false) return;
      const written = appendAudit(opts.db, eventOf(request, audit.action, 'requested', {}));
      requestedOf.set(
        request,
        written.catch(() => undefined),
      );
      // Awaited: the handler acts only once the trail says it was asked to (a failed append answers the request).
      await written;
    });
    /** Appends the route's event: its outcome, and what of the answer is kept (`status_code` first). */
    const append = (request: FastifyRequest, outcome: AuditOutcome, answer: Record<string, unknown>) => {
      const audit = request.routeOptions.config?.audit;
      if (!audit) return;
      const appended: Promise<void> = (requestedOf.get(request) ?? Promise.resolve(undefined))
        .then((requested) => appendAudit(opts.db, eventOf(request, audit.action, outcome, answer, requested)))
        .then(() => undefined)
        .catch((err: unknown) =>
          request.log.error({ err, action: audit.action }, 'appending to the audit trail failed'),
        )
        .finally(() => pending.delete(appended));
      pending.add(appended);
    };
    // A request answered 503 REQUEST_TIMEOUT while its handler was at work may still do what it was asked: once the
    // handler answers (Fastify drops that answer: the reply was sent) or fails, what it did is appended too
    // (`details.after_timeout`), beside the answer the caller had. Once per request.
    const lateRecorded = new WeakSet<FastifyRequest>();
    const late = (request: FastifyRequest, answer: { code?: number; payload?: unknown; failed?: unknown }) => {
      if (lateRecorded.has(request)) return;
      lateRecorded.add(request);
      const err = answer.failed ?? (answer.payload instanceof Error ? answer.payload : undefined);
      if (err !== undefined) {
        // As the error handler would have answered it (a database away: 503 DEPENDENCY_UNAVAILABLE).
        const problem = problemOf(toAppError(err));
        append(request, outcomeOf(problem.status), {
          status_code: problem.status,
          after_timeout: true,
          code: problem.code,
        });
        return;
      }
      const body = typeof answer.payload === 'string' ? answerOf(answer.payload) : answerFields(answer.payload);
      const status = answer.code ?? 200;
      append(request, outcomeOf(status), { status_code: status, after_timeout: true, ...body });
    };
    app.addHook('onRoute', (route) => {
      if (!route.config?.audit) return;
      const handler = route.handler;
      route.handler = function audited(this: FastifyInstance, request, reply) {
        // The status and answer the handler gives after the timeout answered for it.
        let code: number | undefined;
        const setCode = reply.code;
        reply.code = reply.status = function lateCode(this: FastifyReply, status: number) {
          // Not the timeout's own 503 (set while its answer is being sent, the request already timed out).
          if (this.sent || !answeredTimeout(request)) code = status;
          return setCode.call(this, status);
        };
        const send = reply.send;
        reply.send = function lateSend(this: FastifyReply, payload?: unknown) {
          if (this.sent && answeredTimeout(request)) late(request, { code, payload });
          return send.call(this, payload);
        };
        const result = handler.call(this, request, reply);
        if (result && typeof (result as PromiseLike<unknown>).then === 'function') {
          (result as Promise<unknown>).then(
            // Fastify sends a returned value right after this (lateSend records it); one that sent nothing: done.
            () => {
              if (!answeredTimeout(request)) return;
              // Counted among the appends under way from now, so that a close waiting for them waits for this one.
              const settled: Promise<void> = new Promise<void>((r) => setImmediate(r))
                .then(() => late(request, { code }))
                .finally(() => pending.delete(settled));
              pending.add(settled);
            },
            (failed: unknown) => answeredTimeout(request) && late(request, { failed }),
          );
        }
        return result;
      };
    });
    // Appended once the answer is on its way out and the response closes, whether it finished or its client hung up
    // first: Fastify's onResponse runs only for a response that finished, and a withdrawal whose client left while it
    // was confirmed moved money all the same.
    app.addHook('onSend', async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
      if (!request.routeOptions.config?.audit) return payload;
      const statusCode = reply.statusCode;
      const answer = answerOf(payload);
      const res = reply.raw;
      const event = { status_code: statusCode, ...answer };
      if (res.destroyed || res.closed) append(request, outcomeOf(statusCode), event);
      else res.once('close', () => append(request, outcomeOf(statusCode), event));
      return payload;
    });
  },
  { name: 'audit-hook' },
);
