/**
 * The last pass over a service's OpenAPI document, so that every document declares the platform's contract the same
 * way, from one place rather than route by route:
 *
 * - **Security** at the root (`bearerAuth`); a public operation says `security: []`, or `[{}, {bearerAuth: []}]`
 *   where a token is optional (`config.openapi.tokenOptional`: some of its requests need one).
 * - **Problems**: every error answer is a `$ref` to `components.responses.<Status>` (an `application/problem+json`
 *   body of the `Problem` schema, with its headers), keeping a route's own description of it. Each operation also
 *   declares the problems the platform itself can answer: 500 and 503 (a dependency down, overload, the request
 *   timeout) always, 400 when it takes parameters or a body, 413 with a body, 415 with a JSON body, 401 and 403 when
 *   it needs a token. A HEAD answer has no body, its problems included.
 * - **Bodies**: a request body is required unless the route's schema takes none (`requestBody.required: false`).
 * - **No U+0000**: every string of a request's body and query parameters that its own rules do not already keep free
 *   of U+0000 says so (`stateNulFree`): the platform refuses it everywhere (`http/nul-characters.ts`).
 * - **Headers**: every answer declares `X-Request-ID` and `X-Correlation-ID`; a route adds its own per status
 *   (`config.openapi.headers`: paging, `ETag`, `Location`, ...), each a `$ref` to `components.headers`.
 * - **Components**: only what the document uses (the service's registry may name more), an input-only schema under its
 *   plain name (`Wallet`, not `WalletInput`), sorted; `tags` at the root list every tag used.
 */
import { STATUS_CODES } from 'node:http';
import { stateNulFree } from '../http/nul-characters.ts';
import {
  COMMON_HEADERS,
  HEADERS,
  type HeaderName,
  headerRef,
  problemDescription,
  problemHeaders,
  problemResponse,
  problemResponseName,
} from './components.ts';
import { ROUTE_NOTE, type RouteNote } from './route-docs.ts';

type Json = Record<string, unknown>;
interface Operation extends Json {
  parameters?: unknown[];
  requestBody?: { content?: Record<string, unknown>; required?: boolean };
  responses: Record<string, Json>;
  tags?: string[];
  security?: unknown[];
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
const PROBLEM_REF = '#/components/schemas/Problem';
/** Descriptions that say nothing of their own: the generator's default and the Problem schema's. */
const GENERIC = new Set(['Default Response', 'RFC 9457 problem details (application/problem+json)']);

/**
 * The one server every document names: the gateway, the platform's one origin, where callers reach every public path
 * of the four services (`pnpm start` and docker compose publish it on 127.0.0.1:8080; a Kubernetes cluster at its own
 * host name). A service's own port is inside the platform, not for callers.
 */
export const GATEWAY_SERVER = {
  url: 'http://127.0.0.1:8080',
  description:
    "the platform's gateway on a local machine, the one origin of every public path (pnpm start and docker compose; " +
    'in Kubernetes, your host name on port 443)',
  // Meant for the platform's callers (OWASP API9: each server says its audience).
  'x-internal': false,
} as const;

/** A server of a document: where its operations are reached. */
export interface DocumentServer {
  url: string;
  description: string;
  'x-internal'?: boolean;
}

/**
 * The server of the operations no gateway routes (`config.openapi.internal`: a service's `/health`, which the
 * gateway answers for itself, and storage's grants): the service itself, on the platform's internal network, at the
 * port it listens on (its contract port by default).
 */
export function internalServer(service: string, port: number): DocumentServer {
  return {
    url: `http://127.0.0.1:${port}`,
    description:
      `${service} itself on the platform's internal network, for the platform's own callers (probes, Consul, other ` +
      "services): no gateway routes this operation (docker compose: the service's name and port; Kubernetes: its Service)",
    // For the platform itself, not for its callers (OWASP API9: each server says its audience).
    'x-internal': true,
  };
}

export interface DocumentOptions {
  /** The servers the document names (`GATEWAY_SERVER`). */
  servers: DocumentServer[];
  /** The server of the operations no gateway routes (`internalServer`). */
  internalServer?: DocumentServer;
}

const INT32 = { min: -(2 ** 31), max: 2 ** 31 - 1 };
/** A UUID's text, the only text `format: uuid` (its pattern) admits. */
const UUID_LENGTH = 36;

/**
 * States in every schema what its validation already enforces, in the words API linters read (OWASP API4): an
 * integer's `format` (`int32` when its bounds fit, else `int64`: JSON's exact integers fit either), and a UUID's
 * `maxLength` (its pattern admits exactly 36 characters).
 */
function statedBounds(node: unknown): void {
  if (Array.isArray(node)) {
    for (const item of node) statedBounds(item);
    return;
  }
  if (!node || typeof node !== 'object') return;
  const schema = node as Json;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  if (types.includes('integer') && schema.format === undefined) {
    const fits =
      typeof schema.minimum === 'number' &&
      typeof schema.maximum === 'number' &&
      schema.minimum >= INT32.min &&
      schema.maximum <= INT32.max;
    schema.format = fits ? 'int32' : 'int64';
  }
  if (schema.format === 'uuid' && types.includes('string') && schema.maxLength === undefined) {
    schema.maxLength = UUID_LENGTH;
  }
  for (const value of Object.values(schema)) statedBounds(value);
}

/** Whether a response is a problem: a body of the Problem schema, in any media type. */
function isProblem(response: Json): boolean {
  const content = response.content as Record<string, { schema?: Json }> | undefined;
  return Object.values(content ?? {}).some(
    (m) => m.schema?.$ref === PROBLEM_REF || m.schema?.$ref === `${PROBLEM_REF}Input`,
  );
}

/** Every `$ref` in a value. */
function refsIn(value: unknown, into: Set<string>): Set<string> {
  if (Array.isArray(value)) for (const v of value) refsIn(v, into);
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') into.add(v);
      else refsIn(v, into);
    }
  }
  return into;
}

/** Replaces `$ref` strings throughout a value. */
function renameRefs(value: unknown, renames: Map<string, string>): unknown {
  if (Array.isArray(value)) return value.map((v) => renameRefs(v, renames));
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [
        k,
        k === '$ref' && typeof v === 'string' ? (renames.get(v) ?? v) : renameRefs(v, renames),
      ]),
    );
  }
  return value;
}

const sorted = <T>(o: Record<string, T>) =>
  Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));

/** Finishes a document as described above; `doc` is @fastify/swagger's, after the schema transforms. */
export function finishDocument(doc: Json, opts: DocumentOptions): Json {
  const problems = new Set<number>();
  const headers = new Set<HeaderName>(COMMON_HEADERS);
  const componentSchemas = ((doc.components as Json | undefined)?.schemas ?? {}) as Record<string, Json>;
  const resolveSchema = (ref: string) => componentSchemas[ref.replace('#/components/schemas/', '')];
  const tags = new Set<string>();
  const paths = doc.paths as Record<string, Record<string, Operation>>;
  let cookieAuth: Json | undefined;

  for (const item of Object.values(paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      const note = (op[ROUTE_NOTE] as RouteNote | undefined) ?? { public: false, tokenOptional: false, headers: {} };
      delete op[ROUTE_NOTE];
      for (const t of op.tags ?? []) tags.add(t);
      if (note.cookie) {
        op.security = [{ cookieAuth: [] }];
        cookieAuth = { type: 'apiKey', in: 'cookie', name: note.cookie.name, description: note.cookie.description };
      } else if (note.public) op.security = note.tokenOptional ? [{}, { bearerAuth: [] }] : [];
      else delete op.security;
      // An operation no gateway routes is reached at the service itself, not at the document's (gateway) server.
      if (note.internal && opts.internalServer) op.servers = [opts.internalServer];

      // @fastify/swagger marks every body required; one whose schema takes no body is optional.
      if (note.bodyOptional && op.requestBody) op.requestBody.required = false;
      // Text in a JSON (or form) body or a query parameter holds no U+0000 (the hook of nul-characters.ts refuses it).
      for (const param of (op.parameters ?? []) as { in?: string; schema?: unknown }[]) {
        if (param.in === 'query') stateNulFree(param.schema, resolveSchema);
      }
      for (const media of Object.values(op.requestBody?.content ?? {}) as { schema?: Json }[]) {
        if (media.schema?.format !== 'binary') stateNulFree(media.schema, resolveSchema);
      }
      const head = method === 'head';
      const withBody = !!op.requestBody;
      const jsonBody = Object.keys(op.requestBody?.content ?? {}).some((t) => t === 'application/json');
      const auto = [500, 503];
      if ((op.parameters?.length ?? 0) > 0 || withBody) auto.push(400);
      if (withBody) auto.push(413);
      if (jsonBody) auto.push(415);
      if (!note.public) auto.push(401, 403);
      for (const status of auto) op.responses[status] ??= { description: problemDescription(status), content: {} };

      for (const [code, response] of Object.entries(op.responses)) {
        const status = Number(code);
        const own =
          typeof response.description === 'string' && !GENERIC.has(response.description)
            ? response.description
            : undefined;
        const problem =
          status >= 400 && (isProblem(response) || !response.content || Object.keys(response.content).length === 0);
        const routeHeaders = note.headers[status] ?? [];
        if (problem && !head) {
          problems.add(status);
          const description = own && own !== problemDescription(status) ? own : undefined;
          const shared = Object.keys(problemHeaders(status));
          if (routeHeaders.every((h) => shared.includes(h))) {
            op.responses[code] = {
              $ref: `#/components/responses/${problemResponseName(status)}`,
              ...(description ? { description } : {}),
            };
            continue;
          }
          // A header of the route's own on a problem (`Retry-After` on a 409): the shared response, spelled out.
          const spelled = problemResponse(status);
          for (const h of routeHeaders) headers.add(h);
          op.responses[code] = {
            ...spelled,
            ...(description ? { description } : {}),
            headers: {
              ...(spelled.headers as Json),
              ...Object.fromEntries(routeHeaders.map((h) => [h, headerRef(h)])),
            },
          };
          continue;
        }
        if (response.description === 'Default Response') response.description = STATUS_CODES[status] ?? code;
        const extra = [
          ...(problem ? Object.keys(problemHeaders(status)) : COMMON_HEADERS),
          ...routeHeaders,
        ] as HeaderName[];
        for (const h of extra) headers.add(h);
        const declared = (response.headers as Json | undefined) ?? {};
        op.responses[code] = {
          ...response,
          ...(problem ? { description: own ?? problemDescription(status) } : {}),
          headers: { ...declared, ...Object.fromEntries(extra.map((h) => [h, headerRef(h)])) },
        };
        if (problem) delete op.responses[code]!.content;
      }
      op.responses = Object.fromEntries(Object.entries(op.responses).sort(([a], [b]) => a.localeCompare(b)));
    }
  }
  for (const status of problems) for (const h of Object.keys(problemHeaders(status))) headers.add(h as HeaderName);

  const components = (doc.components ?? {}) as Json;
  const responses = Object.fromEntries([...problems].sort().map((s) => [problemResponseName(s), problemResponse(s)]));
  const allSchemas = (components.schemas ?? {}) as Record<string, Json>;

  // Only the schemas reachable from the paths and the responses, then input-only ones under their plain name.
  const reachable = new Set<string>();
  const queue = [...refsIn([paths, responses], new Set())];
  while (queue.length > 0) {
    const ref = queue.pop()!;
    const name = ref.replace('#/components/schemas/', '');
    if (reachable.has(name) || !allSchemas[name]) continue;
    reachable.add(name);
    queue.push(...refsIn(allSchemas[name], new Set()));
  }
  const renames = new Map<string, string>();
  for (const name of reachable) {
    const plain = name.replace(/Input$/, '');
    if (plain !== name && !reachable.has(plain))
      renames.set(`#/components/schemas/${name}`, `#/components/schemas/${plain}`);
  }
  const schemas = Object.fromEntries(
    [...reachable].map((name) => [
      renames.get(`#/components/schemas/${name}`)?.split('/').pop() ?? name,
      allSchemas[name],
    ]),
  );

  const finished: Json = {
    ...doc,
    servers: opts.servers,
    security: [{ bearerAuth: [] }],
    tags: [...tags].sort().map((name) => ({ name })),
    paths,
    components: {
      ...components,
      ...(cookieAuth ? { securitySchemes: { ...(components.securitySchemes as Json | undefined), cookieAuth } } : {}),
      schemas: sorted(schemas),
      responses: sorted(responses),
      headers: Object.fromEntries([...headers].sort().map((h) => [h, HEADERS[h]])),
    },
  };
  statedBounds(finished.paths);
  statedBounds(finished.components);
  return renameRefs(finished, renames) as Json;
}
