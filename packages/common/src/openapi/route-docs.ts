/**
 * What a route tells its OpenAPI operation beyond its schemas (`config.openapi`), and the per-route transform that
 * turns a route into an operation: zod schemas to JSON Schema (named ones as `$ref`s to the service's registry), the
 * path's trailing wildcard to a named parameter (`/objects/*` → `/objects/{objectKey}`: OpenAPI has no `{*}`), and a
 * note for `finishDocument` of whether the route is public and which headers its answers carry.
 */
import type { SwaggerTransform } from '@fastify/swagger';
import type { RouteOptions } from 'fastify';
import { createJsonSchemaTransform } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { HeaderName } from './components.ts';

/** A registry of a service's named schemas: each becomes `components.schemas.<id>`, used by `$ref`. */
export type SchemaRegistry = z.core.$ZodRegistry<{ id: string }>;

export interface RouteDocs {
  /** The name of the path's trailing wildcard in the document (`objectKey`); `path` when not given. */
  wildcard?: string;
  /** Response headers beyond the ones every answer carries, by status. */
  headers?: Partial<Record<number, readonly HeaderName[]>>;
  /** A public route that takes a token for some requests (`security: [{}, {bearerAuth: []}]`). */
  tokenOptional?: boolean;
  /**
   * Served to the platform itself on its internal network, never routed by a gateway (a service's `/health`, storage's
   * grants): the operation names the service's own address as its server, not the gateway's.
   */
  internal?: boolean;
  /**
   * A public route whose caller is known by a cookie of the service's own (billing's workload port hosts: a browser's
   * grant), named here: the operation's security is that cookie (`cookieAuth`), not a token.
   */
  cookie?: { name: string; description: string };
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** How the route reads in the OpenAPI document beyond its schemas. */
    openapi?: RouteDocs;
  }
}

/** The headers of a page of a list (docs/conventions.md, "Paging"). */
export const PAGE_HEADERS: readonly HeaderName[] = ['X-Next-Cursor', 'Link'];

/** Where the transform leaves its note on an operation (an `x-` key, which @fastify/swagger copies over). */
export const ROUTE_NOTE = 'x-gpu-route';

/** The note `finishDocument` reads, then removes. */
export interface RouteNote {
  public: boolean;
  tokenOptional: boolean;
  headers: Partial<Record<number, readonly HeaderName[]>>;
  /** The route's body schema takes no body at all (`.optional()`/`.nullish()`): `requestBody.required: false`. */
  bodyOptional?: boolean;
  /** `RouteDocs.internal`: the operation's server is the service itself. */
  internal?: boolean;
  /** `RouteDocs.cookie`: the operation's security is that cookie. */
  cookie?: { name: string; description: string };
}

/** Whether a route's body schema (zod) accepts a request without a body. */
function acceptsNoBody(body: unknown): boolean {
  return body instanceof z.ZodType && body.safeParse(undefined).success;
}

type JsonObject = { properties?: Record<string, unknown>; required?: string[] } & Record<string, unknown>;

/** The JSON schema of the path parameters with `*` renamed. */
function renameWildcard(params: unknown, name: string): unknown {
  const p = params as JsonObject | undefined;
  if (!p?.properties || !('*' in p.properties)) return params;
  const { '*': wildcard, ...rest } = p.properties;
  return {
    ...p,
    properties: { ...rest, [name]: wildcard },
    ...(p.required ? { required: p.required.map((r) => (r === '*' ? name : r)) } : {}),
  };
}

/** The per-route transform of a service's document. */
export function routeTransform(opts: {
  schemas: SchemaRegistry;
  isPublic: (route: RouteOptions) => boolean;
}): SwaggerTransform {
  const zodTransform = createJsonSchemaTransform({ schemaRegistry: opts.schemas });
  return (input) => {
    const out = zodTransform(input) as { schema: Record<string, unknown> | undefined; url: string };
    const schema = out.schema;
    if (!schema || schema.hide) return out as never;
    const route = input.route as RouteOptions;
    const docs = route.config?.openapi ?? {};
    let url = out.url;
    if (url.endsWith('*')) {
      const name = docs.wildcard ?? 'path';
      url = `${url.slice(0, -1)}:${name}`;
      schema.params = renameWildcard(schema.params, name);
    }
    // @fastify/swagger suffixes a HEAD route's operationId with `-head`, for a HEAD that copies its GET's schema; a
    // HEAD route of its own (storage's) names its own operation.
    if (typeof schema.operationId === 'string') schema.operationId = schema.operationId.replace(/-head$/, '');
    const note: RouteNote = {
      public: opts.isPublic(route),
      tokenOptional: docs.tokenOptional === true,
      headers: docs.headers ?? {},
      ...(acceptsNoBody(input.schema?.body) ? { bodyOptional: true } : {}),
      ...(docs.internal ? { internal: true } : {}),
      ...(docs.cookie ? { cookie: docs.cookie } : {}),
    };
    schema[ROUTE_NOTE] = note;
    // The scope that lets an API key call the operation (auth/scopes.ts); absent: no API key may.
    const scope = route.config?.scope;
    if (scope !== undefined) schema['x-api-key-scope'] = typeof scope === 'string' ? scope : [...scope].join(' ');
    // The action a verified e-mail address may be required for (auth/verified-email.ts), whether or not it is now.
    const action = route.config?.verifiedEmail;
    if (action !== undefined) schema['x-verified-email-action'] = action;
    return { schema, url } as never;
  };
}

/**
 * Metadata by schema: the registry's own (a name), over what `.describe()`/`.meta()` put in zod's global registry,
 * so that a named schema's document keeps its descriptions.
 */
class OverGlobal extends WeakMap<object, Record<string, unknown>> {
  override get(schema: object): Record<string, unknown> | undefined {
    const global = (z.globalRegistry as unknown as { _map: WeakMap<object, Record<string, unknown>> })._map.get(schema);
    const own = super.get(schema);
    return global || own ? { ...global, ...own } : undefined;
  }
}

/**
 * A new, empty registry of named schemas for a service: `schema.register(registry, { id: 'Wallet' })` makes the
 * schema `components.schemas.Wallet` of the service's document, reached by `$ref`. Each service has its own, so two
 * services never share a name.
 */
export function schemaRegistry(): SchemaRegistry {
  const registry = z.registry<{ id: string }>();
  (registry as unknown as { _map: WeakMap<object, unknown> })._map = new OverGlobal();
  return registry;
}
