/**
 * `POST <url>` (`/messages` by default): a service's HTTP inbox, the second transport of its message bus
 * (messaging/bus.ts), for a sender that runs without NATS. The body is one message as the sender's outbox wrote it
 * (`{event_id, kind, occurred_at, ...data}`), checked by its kind's schema (400 otherwise, naming the field: a kind
 * the service does not take is a 400 too) and handed to the same handler the JetStream consumer calls. 200 `{kind,
 * outcome}`: `applied`, or `unapplicable` when the handler says it can never apply (about a machine the service does
 * not know): the sender counts both delivered. A handler's failure is the service's 5xx: the sender calls again.
 * Only the roles given (platform services) may post.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Role } from '../auth/roles.ts';
import type { MessageBus } from '../messaging/bus.ts';
import type { SchemaRegistry } from '../openapi/route-docs.ts';
import { problemSchema } from './problem-schema.ts';
import { ignoringUnknownFields } from './strict-input.ts';

export interface InboxRouteOptions {
  bus: MessageBus;
  roles: readonly Role[];
  schemas: SchemaRegistry;
  url?: string;
  /** The OpenAPI tag of the route. */
  tag?: string;
}

export function inboxRoute(app: FastifyInstance, opts: InboxRouteOptions): void {
  const kinds = opts.bus.schemas() as z.ZodObject[];
  if (kinds.length === 0) throw new Error('an inbox needs at least one message kind');
  // By `kind`, so that a refusal names the field of that kind's schema. Unknown fields are dropped, not refused: a
  // sender newer than the service keeps its messages flowing.
  const body = ignoringUnknownFields(z.discriminatedUnion('kind', kinds as [z.ZodObject, ...z.ZodObject[]]))
    .describe(`One message as its sender's outbox wrote it; the kinds taken: ${opts.bus.kinds().join(', ')}`)
    .register(opts.schemas, { id: 'InboxMessage' });
  const answer = z
    .object({
      kind: z.string(),
      outcome: z
        .enum(['applied', 'unapplicable'])
        .describe('`unapplicable`: it can never apply (about something the service does not know)'),
    })
    .register(opts.schemas, { id: 'MessageDelivered' });
  const problems = Object.fromEntries([400, 401, 403, 503].map((s) => [s, problemSchema]));
  app.post(
    opts.url ?? '/messages',
    {
      // For the platform's own services on the internal network: no gateway routes it (tools/gateway's SERVICE_ONLY).
      config: { roles: opts.roles, openapi: { internal: true } },
      schema: {
        tags: [opts.tag ?? 'messages'],
        operationId: 'deliverMessage',
        summary: 'Deliver a message to the service (a platform service without NATS)',
        description:
          "The service's message bus over HTTP: the same kinds, schemas and handlers as its JetStream consumers. " +
          'Idempotent as each kind is (a message delivered twice changes nothing more). Platform services only.',
        body,
        response: { 200: answer, ...problems },
      },
    },
    async (request) => {
      const delivery = await opts.bus.deliver(request.body, {
        correlationId: (request as { correlationId?: string }).correlationId,
      });
      // The schema above took it, so its kind has a handler and its body passes that handler's schema.
      return { kind: delivery.kind, outcome: delivery.outcome === 'unapplicable' ? 'unapplicable' : 'applied' };
    },
  );
}
