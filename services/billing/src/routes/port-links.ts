/**
 * `POST /api/v1/billing/sessions/{id}/port-links`: a link that opens a port of the renter's running workload in a
 * browser, at the port's own origin (domain/reach/port-grants.ts; the requests there: routes/reach-ports.ts).
 */
import { type App, callerOf, errors, zInt } from '@gpu/common';
import { z } from 'zod';
import { MAX_GRANTS_PER_SESSION, makePortLink, reachTarget } from '../domain/reach/index.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';

const params = z.object({ sessionID: z.uuid() });

const portLinkRequest = z
  .object({ port: zInt(1, 65535).describe('the port inside the workload (on its loopback)') })
  .describe('Which port of the workload to open')
  .register(schemas, { id: 'PortLinkRequest' });

const portLink = z
  .object({
    url: z
      .string()
      .describe(
        'the link: `<scheme>://<session>-<port>.ports.<domain>/?gpu-port-ticket=...`, opened once, in a browser',
      ),
    origin: z.string().describe("the port's own origin, where the browser stays signed in"),
    expires_at: z.string().describe('until when the link may be opened (a minute)'),
  })
  .describe("A link into a port of the session's workload")
  .register(schemas, { id: 'PortLink' });

export async function portLinkRoutes(app: App, deps: RouteDeps): Promise<void> {
  const { billing: ctx, config } = deps;
  app.post(
    '/api/v1/billing/sessions/:sessionID/port-links',
    {
      config: { scope: 'connect', roles: ['renter', 'provider', 'admin'] },
      schema: {
        tags: ['reach'],
        operationId: 'createPortLink',
        summary: 'A link that opens a port of the running workload in a browser (`gpu open`)',
        description:
          "For the session's renter alone (their sign-in, or an API key with `connect`): 404 SESSION_NOT_FOUND for " +
          'anyone else. The link is good for one opening within a minute; the browser that opens it is signed in on ' +
          "the port's own origin (`<session>-<port>.ports.<domain>`, a cookie of that host's) for `reach." +
          'port_grant_ttl`, as long as the session runs and the credential the link was made with holds. A session ' +
          `keeps its newest ${MAX_GRANTS_PER_SESSION} links and signed-in browsers together: one more forgets the ` +
          'oldest. 409 ' +
          'SESSION_NOT_ACTIVE, NO_WORKLOAD, WORKLOAD_NOT_RUNNING; PORT_LINKS_OFF where `reach.ports_url` is not set.',
        params,
        body: portLinkRequest,
        response: { 201: portLink, ...problems(400, 401, 403, 404, 409) },
      },
    },
    async (request, reply) => {
      const { sessionID } = request.params as z.infer<typeof params>;
      const { port } = request.body as z.infer<typeof portLinkRequest>;
      const actor = callerOf(request);
      await reachTarget(ctx, actor, sessionID);
      if (!config.reach.ports_url) {
        throw errors.conflict(
          'PORT_LINKS_OFF',
          'this platform opens no ports in browsers (`reach.ports_url` is not set): use `gpu port-forward`',
        );
      }
      const link = await makePortLink(ctx, actor, sessionID, port, config.reach.ports_url);
      const origin = new URL(link.url).origin;
      return reply.code(201).send({ url: link.url, origin, expires_at: link.expiresAt.toISOString() });
    },
  );
}
