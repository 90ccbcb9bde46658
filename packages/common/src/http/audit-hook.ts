/**
 * The audit trail of routes that move money or change who gets it: a route names its action in its config
 *
 *   app.post('/api/v1/wallet/:walletID/withdraw', { config: { audit: { action: 'withdrawal', body: ['amount'] } } })
 *
 * and every answer of it, allowed or refused, is appended to the service's `audit_events` (db/audit-trail.ts) once
 * sent: who (the token's subject, kind and API key), from where, in which request, what (the route's first path
 * parameter as the target, the body fields named, the answer's `id`, `status` or problem `code`) and the outcome
 * (2xx/3xx succeeded, 4xx refused, 5xx failed). A request the access check refused before the handler is recorded too.
 * A machine client acting for a user (a provider's daemon) is named with `details.acting_for`, the user; an admin or a
 * platform service acting on someone's wallet or machine is the actor beside a target that is not theirs.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Kysely } from 'kysely';
import { type AuditOutcome, appendAudit, auditActor } from '../db/audit-trail.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Append every answer of this route to the audit trail (http/audit-hook.ts). */
    audit?: { action: string; body?: readonly string[] };
  }
}

/** What of an answer's body the trail keeps. */
const ANSWER_FIELDS = ['id', 'status', 'code'] as const;
const answers = new WeakMap<FastifyRequest, Record<string, unknown>>();

function outcomeOf(status: number): AuditOutcome {
  if (status >= 500) return 'failed';
  return status >= 400 ? 'refused' : 'succeeded';
}

/** `walletID: 5b…` → `wallet:5b…`: the first path parameter names what was acted on. */
function targetOf(params: unknown): string | null {
  const [entry] = Object.entries((params ?? {}) as Record<string, unknown>);
  if (!entry) return null;
  const [name, value] = entry;
  return `${name.replace(/I[Dd]$|_id$/, '').toLowerCase()}:${String(value)}`;
}

function picked(body: unknown, fields: readonly string[] | undefined): Record<string, unknown> {
  if (!fields || !body || typeof body !== 'object') return {};
  const b = body as Record<string, unknown>;
  return Object.fromEntries(fields.filter((f) => b[f] !== undefined).map((f) => [f, b[f]]));
}

export const auditHook = fp(
  async (app: FastifyInstance, opts: { db: Kysely<never> }) => {
    app.addHook('onSend', async (request: FastifyRequest, _reply: FastifyReply, payload: unknown) => {
      if (!request.routeOptions.config?.audit || typeof payload !== 'string' || payload.length > 65_536) return payload;
      try {
        const body = JSON.parse(payload) as Record<string, unknown>;
        if (body && typeof body === 'object' && !Array.isArray(body)) {
          answers.set(
            request,
            Object.fromEntries(ANSWER_FIELDS.filter((f) => body[f] !== undefined).map((f) => [f, body[f]])),
          );
        }
      } catch {
        // Not JSON: nothing of it is kept.
      }
      return payload;
    });
    app.addHook('onResponse', async (request: FastifyRequest, reply: FastifyReply) => {
      const audit = request.routeOptions.config?.audit;
      if (!audit) return;
      const p = request.principal;
      await appendAudit(opts.db, {
        action: audit.action,
        outcome: outcomeOf(reply.statusCode),
        actor: p && !p.unchecked ? auditActor(p) : null,
        address: request.clientIp,
        target: targetOf(request.params),
        details: {
          status_code: reply.statusCode,
          ...(p?.actsFor !== undefined && p.actsFor !== p.subject ? { acting_for: p.actsFor } : {}),
          ...picked(request.body, audit.body),
          ...answers.get(request),
        },
        requestId: String(request.id),
      }).catch((err: unknown) =>
        request.log.error({ err, action: audit.action }, 'appending to the audit trail failed'),
      );
    });
  },
  { name: 'audit-hook' },
);
