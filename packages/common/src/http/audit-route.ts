/**
 * `GET <url>`: a service's audit trail (db/audit-trail.ts) for admins, oldest first, with filters and the platform's
 * keyset paging. Each service mounts it where its routes live (auth: /api/v1/auth/audit, billing:
 * /api/v1/billing/audit).
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { z } from 'zod';
import { listAudit } from '../db/audit-trail.ts';
import { PAGE_HEADERS, type SchemaRegistry } from '../openapi/route-docs.ts';
import { afterCursor, keysetPage } from '../paging.ts';
import { zTimestamp } from '../timestamp.ts';
import { pageQuery, setNextPage } from './paging.ts';
import { problemSchema } from './problem-schema.ts';

export function auditTrailRoute(
  app: FastifyInstance,
  opts: { db: Kysely<never>; url: string; schemas: SchemaRegistry; examples: string },
): void {
  const auditEventSchema = z
    .object({
      id: z.uuid(),
      at: z.string().describe('RFC 3339, UTC, to the microsecond'),
      action: z.string().describe(opts.examples),
      outcome: z.enum(['succeeded', 'refused', 'failed']),
      actor_id: z.string().nullable().describe("a user's or a machine client's ID; null when nobody known acted"),
      actor_kind: z.enum(['user', 'client']).nullable(),
      actor_credential: z.string().nullable().describe("the API key's ID (or mailed_code) when not the sign-in itself"),
      address: z.string().nullable().describe("the client's address"),
      target: z.string().nullable().describe('what was acted on, as kind:id'),
      details: z.record(z.string(), z.unknown()),
      request_id: z.string().nullable(),
    })
    .describe('One security- or money-relevant action')
    .register(opts.schemas, { id: 'AuditEvent' });
  const problems = Object.fromEntries([400, 401, 403].map((s) => [s, problemSchema]));
  app.get(
    opts.url,
    {
      config: { roles: ['admin'], openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags: ['audit'],
        operationId: 'listAuditEvents',
        summary: 'The audit trail: who did what, when, from where, and the outcome (oldest first)',
        description:
          'Admins only. Filters: action, actor_id, target, outcome, and from/to (RFC 3339, [from, to)). Paged as every ' +
          'list. Append-only: nothing updates or deletes an event but the retention purge (audit.retention).',
        querystring: z.object({
          ...pageQuery,
          action: z.string().min(1).max(100).optional(),
          actor_id: z.uuid().optional(),
          target: z.string().min(1).max(200).optional(),
          outcome: z.enum(['succeeded', 'refused', 'failed']).optional(),
          from: zTimestamp().optional(),
          to: zTimestamp().optional(),
        }),
        response: { 200: z.array(auditEventSchema).register(opts.schemas, { id: 'AuditEventList' }), ...problems },
      },
    },
    async (request, reply) => {
      const q = request.query as {
        limit: number;
        cursor?: string;
        action?: string;
        actor_id?: string;
        target?: string;
        outcome?: 'succeeded' | 'refused' | 'failed';
        from?: string;
        to?: string;
      };
      const rows = await listAudit(opts.db, {
        action: q.action,
        actorId: q.actor_id,
        target: q.target,
        outcome: q.outcome,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
        after: afterCursor(q.cursor),
        limit: q.limit + 1,
      });
      const page = keysetPage(rows, q.limit);
      setNextPage(request, reply, page.nextCursor);
      return page.items.map(({ cursor_at, ...e }) => ({ ...e, at: cursor_at }));
    },
  );
}
