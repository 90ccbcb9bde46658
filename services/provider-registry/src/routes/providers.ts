/**
 * The provider endpoints: register, list (discovery), get, full update,
 * status update, delete (the heartbeat has a plugin of its own,
 * `heartbeat.ts`). Handlers parse, authorize, call the registry service and
 * reply with the presenter (`wire/provider-json.ts`); rules live in `domain/`.
 */
import { type App, callerOf, invalidCursor, PAGE_HEADERS, problemSchema, setNextPage } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { MANAGING_ROLES, READING_ROLES, RELIABILITY_ROLES } from '../domain/access.ts';
import { type Cursor, cursorOf, cursorText } from '../domain/discovery.ts';
import { registryErrors } from '../errors.ts';
import { providerJson } from '../wire/provider-json.ts';
import type { ProviderRoutesOptions } from './options.ts';
import {
  bindDaemonSchema,
  listQuerySchema,
  messageSchema,
  providerIdParams,
  providerInputSchema,
  providerListSchema,
  providerSchema,
  providerUpdateSchema,
  reliabilityJson,
  reliabilitySchema,
  statusResultJson,
  statusResultSchema,
  statusUpdateSchema,
} from './schemas.ts';

const tags = ['providers'];
const errorsOf = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemSchema]));
// API keys: a provider's machines with the scope machines (reads with read too).
const manage = { roles: MANAGING_ROLES, scope: 'machines' as const };
const read = { roles: READING_ROLES, scope: 'machines' as const };

export const providerRoutes: FastifyPluginAsync<ProviderRoutesOptions> = async (fastify, opts) => {
  const app = fastify as unknown as App;
  const { registry, pages } = opts;

  app.post(
    '/providers',
    {
      config: { ...manage, openapi: { headers: { 201: ['Location'] } } },
      schema: {
        tags,
        operationId: 'registerProvider',
        summary: 'Register a provider with its GPUs',
        description:
          'Creates the provider under a new UUID. (owner_id, name) identifies a provider: a second registration with the same pair is 409 PROVIDER_ALREADY_EXISTS. ' +
          '`status: busy` registers it held off the market by its owner (`held`) until an explicit `idle`.',
        body: providerInputSchema,
        response: { 201: providerSchema, ...errorsOf(400, 401, 403, 409, 503) },
      },
    },
    async (request, reply) => {
      const provider = await registry.register(callerOf(request), request.body, request.correlationId);
      return reply.code(201).header('location', `/providers/${provider.id}`).send(providerJson(provider));
    },
  );

  app.get(
    '/providers',
    {
      config: { ...read, openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags,
        operationId: 'listProviders',
        summary: 'Discover providers by status and GPU properties',
        description:
          'Filters combine with AND. GPU conditions (gpu_model, min_vram, architecture) hold for single GPUs and min_gpus counts the GPUs meeting all of them. ' +
          'The status is the effective one: a provider silent past the offline bound is offline. ' +
          'Pages are ordered by `sort` then id; when more rows exist the response carries `X-Next-Cursor` (and a `Link: rel="next"`).',
        querystring: listQuerySchema,
        response: {
          200: providerListSchema,
          ...errorsOf(400, 401, 403, 503),
        },
      },
    },
    async (request, reply) => {
      const { cursor: text, ...query } = request.query;
      let cursor: Cursor | undefined;
      if (text !== undefined) {
        const read = cursorOf(text, query.sort);
        if (typeof read === 'string') throw invalidCursor(read);
        cursor = read;
      }
      const page = await registry.list(callerOf(request), { ...query, cursor });
      setNextPage(request, reply, page.next && cursorText(page.next));
      // JSON the database already rendered (`db/provider-json-sql.ts`) is sent as it is: neither parsed nor
      // validated nor serialized again.
      return pages.send(reply, page.items);
    },
  );

  app.get(
    '/providers/:providerID',
    {
      config: read,
      schema: {
        tags,
        operationId: 'getProvider',
        summary: 'Get one provider',
        params: providerIdParams,
        response: { 200: providerSchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) => providerJson(await registry.get(callerOf(request), request.params.providerID)),
  );

  app.get(
    '/providers/:providerID/reliability',
    {
      config: { roles: RELIABILITY_ROLES, scope: 'offers' },
      schema: {
        tags,
        operationId: 'getProviderReliability',
        summary: "A machine's reliability: uptime over 30 days and sessions ended by its fault",
        description:
          'Anyone with a token, renters included: it names nothing of the owner or the address. Kept as statuses ' +
          'change and sessions end, never by reading history per request.',
        params: providerIdParams,
        response: { 200: reliabilitySchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) =>
      reliabilityJson(request.params.providerID, await registry.reliability(request.params.providerID)),
  );

  app.put(
    '/providers/:providerID',
    {
      config: manage,
      schema: {
        tags,
        operationId: 'updateProvider',
        summary: 'Replace a provider (full update, GPUs included)',
        description:
          'Every writable field is replaced; absent optional fields become null. registered_at, last_seen_at, held and daemon_client_id are read-only; an id in the body must equal the path. ' +
          'A status change here is published like an explicit status update, and refused like one when it contradicts ' +
          'the rental sessions (409 STATUS_CONTRADICTS_SESSIONS: `idle` while fully rented); `busy` holds the machine ' +
          'off the market and `idle` releases it, as PATCH status does.',
        params: providerIdParams,
        body: providerUpdateSchema,
        response: { 200: providerSchema, ...errorsOf(400, 401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const id = request.params.providerID;
      const {
        id: bodyId,
        registered_at: _registered,
        last_seen_at: _seen,
        held: _held,
        daemon_client_id: _daemon,
        ...input
      } = request.body;
      if (bodyId !== undefined && bodyId !== id) throw registryErrors.idMismatch(id, bodyId);
      return providerJson(await registry.update(callerOf(request), id, input, request.correlationId));
    },
  );

  app.put(
    '/providers/:providerID/daemon',
    {
      config: manage,
      schema: {
        tags,
        operationId: 'bindProviderDaemon',
        summary: 'Bind the machine to a daemon client (or to none)',
        description:
          "Only the machine's daemon, the one it is bound to, heartbeats it, sets its status, updates or deletes it, " +
          'and reports its sessions to billing; another daemon of the owner gets 403 NOT_MACHINE_DAEMON. A machine is ' +
          'bound to the daemon that registered it. Its owner (or an admin or service) binds it to another of its ' +
          'daemon clients (a new one after a reinstall) or to none; a daemon claims a machine bound to none for ' +
          'itself, and nothing else (403 NOT_MACHINE_DAEMON). Billing moves the running sessions of the machine to ' +
          'the new client (the `provider.daemon_bound` event).',
        params: providerIdParams,
        body: bindDaemonSchema,
        response: { 200: providerSchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) =>
      providerJson(
        await registry.bindDaemon(
          callerOf(request),
          request.params.providerID,
          request.body.client_id,
          request.correlationId,
        ),
      ),
  );

  app.patch(
    '/providers/:providerID/status',
    {
      config: manage,
      schema: {
        tags,
        operationId: 'setProviderStatus',
        summary: 'Set the provider status explicitly',
        description:
          'Any state, except what contradicts the rental sessions billing reported: `idle` while the machine is fully ' +
          'rented is 409 STATUS_CONTRADICTS_SESSIONS. `busy` holds the machine off the market, rented or not (`held`: ' +
          'no offer lists it, heartbeats and session ends leave it busy, billing starts no rental on it) until an ' +
          'explicit `idle`. `offline`, `maintenance` and `error` are allowed on a rented machine (a hold outlives ' +
          'them); billing then ends its running sessions, billed to the last minute its daemon reported.',
        params: providerIdParams,
        body: statusUpdateSchema,
        response: { 200: statusResultSchema, ...errorsOf(400, 401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const id = request.params.providerID;
      const result = await registry.setStatus(callerOf(request), id, request.body.status, request.correlationId);
      return statusResultJson('provider status updated', result);
    },
  );

  app.delete(
    '/providers/:providerID',
    {
      config: manage,
      schema: {
        tags,
        operationId: 'deleteProvider',
        summary: 'Delete a provider and its GPUs',
        description:
          'Also a rented machine: the removal is published (`provider.removed`), and billing ends every session still ' +
          'running on it, billed to the last minute its daemon reported; later usage reports for those sessions are ' +
          'refused.',
        params: providerIdParams,
        response: { 200: messageSchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const id = request.params.providerID;
      await registry.remove(callerOf(request), id, request.correlationId);
      return { message: 'provider deleted', id };
    },
  );
};
