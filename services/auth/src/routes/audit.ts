/** /api/v1/auth/audit: the audit trail of security-relevant actions, for admins (domain/audit.ts). */
import {
  type App,
  afterCursor,
  keysetPage,
  listAudit,
  PAGE_HEADERS,
  pageQuery,
  setNextPage,
  zTimestamp,
} from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import { problems, schemas } from './schemas.ts';

const auditEventSchema = z
  .object({
    id: z.uuid(),
    at: z.string().describe('RFC 3339, UTC, to the microsecond'),
    action: z
      .string()
      .describe('roles_changed, api_key_created, api_key_revoked, api_key_refused, client_created, ...'),
    outcome: z.enum(['succeeded', 'refused']),
    actor_id: z.string().nullable().describe("a user's or a machine client's ID; null when nobody known acted"),
    actor_kind: z.enum(['user', 'client']).nullable(),
    actor_credential: z.string().nullable().describe("the API key's ID, or mailed_code, when not the sign-in itself"),
    address: z.string().nullable().describe("the client's address"),
    target: z.string().nullable().describe('what was acted on: user:<id>, api_key:<id>, client:<id>, sign_in:<id>'),
    details: z.record(z.string(), z.unknown()),
    request_id: z.string().nullable(),
  })
  .describe('One security-relevant action')
  .register(schemas, { id: 'AuditEvent' });

export async function auditRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.get(
    '/audit',
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
          outcome: z.enum(['succeeded', 'refused']).optional(),
          from: zTimestamp().optional(),
          to: zTimestamp().optional(),
        }),
        response: {
          200: z.array(auditEventSchema).register(schemas, { id: 'AuditEventList' }),
          ...problems(400, 401, 403),
        },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const rows = await listAudit(ctx.db, {
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
