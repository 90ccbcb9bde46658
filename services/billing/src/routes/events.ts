/** Session events over HTTP (domain/sessions/current-usage.ts): what NATS carries, for callers without NATS. */
import {
  type App,
  afterCursor,
  callerOf,
  pageQuery,
  SESSION_ENDED_EVENT_KINDS,
  SESSION_RUNNING_EVENT_KINDS,
  setNextPage,
} from '@gpu/common';
import { z } from 'zod';
import type { SessionEventKind } from '../domain/events.ts';
import { sessionEventList } from '../domain/sessions/index.ts';
import { sessionEventJson } from '../wire/presenters.ts';
import { SESSION_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { csv, PAGE_DOCS, problems, schemas } from './schemas.ts';
import { billingRecordSchema, sessionSchema } from './session-schemas.ts';

/** The kinds of session events. */
const SESSION_EVENT_KINDS = [
  ...SESSION_RUNNING_EVENT_KINDS,
  ...SESSION_ENDED_EVENT_KINDS,
  'workload.running',
] as const satisfies readonly SessionEventKind[];

const sessionEventSchema = z
  .object({
    event_id: z.uuid().describe("the event's ID: the NATS message's `event_id` and `Nats-Msg-Id`"),
    kind: z.enum(SESSION_EVENT_KINDS),
    occurred_at: z.string(),
    session: sessionSchema.describe('the session as the change left it'),
    billing_record: billingRecordSchema.optional().describe('an ended session’s billing record'),
  })
  .register(schemas, { id: 'SessionEvent' });

const sessionEventListSchema = z
  .array(sessionEventSchema)
  .describe('Session events, newest first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'SessionEventList' });

export async function eventRoutes(app: App, { billing: ctx }: RouteDeps) {
  app.get(
    '/api/v1/billing/events',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['sessions'],
        operationId: 'listSessionEvents',
        summary: "Session events, newest first: a renter's low-balance warning, grace period, end, over HTTP",
        description:
          'The events billing publishes on NATS (`billing.events.session.*`), the same bodies, kept for ' +
          '`billing.event_retention` (30 days) for callers without NATS: `session.started`, `session.low_balance` ' +
          '(the funds left pay for less than `billing.low_balance_warning` of running), `session.grace_period`, ' +
          '`session.resumed`, `session.completed`, `session.terminated`. A user (or their daemon) reads the events ' +
          'of the sessions they rent or that run on machines they own; admins and services read all. Filters: ' +
          '`session_id` (404 for an unknown session, 403 when the caller is no party of it), `kind` (repeat or ' +
          'separate with commas). Poll it: new events come first. Paging as everywhere.',
        querystring: z.object({
          session_id: z.uuid().optional(),
          kind: csv(z.enum(SESSION_EVENT_KINDS)).describe(SESSION_EVENT_KINDS.join(', ')),
          ...pageQuery,
        }),
        response: {
          200: sessionEventListSchema,
          ...problems(400, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const page = await sessionEventList(ctx, callerOf(request), {
        sessionId: q.session_id,
        kinds: q.kind,
        limit: q.limit,
        after: afterCursor(q.cursor),
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map(sessionEventJson);
    },
  );
}
