/**
 * What a service's OpenAPI document must hold for a client author to trust it (docs/conventions.md, "API
 * documents"), as a list of what is wrong (empty: nothing). Each service's `openapi-document.test.ts` runs it on the
 * document it serves, with the routes its app serves.
 */

type Json = Record<string, unknown>;
interface Operation {
  operationId?: string;
  summary?: string;
  requestBody?: { content?: Record<string, { schema?: Json }> };
  responses?: Record<string, { $ref?: string; content?: Record<string, { schema?: Json }> }>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head'];
/** camelCase, starting with a verb's lowercase letter: `getWallet`, `listProviders`, `uploadObject`. */
const OPERATION_ID = /^[a-z]+[A-Z][A-Za-z0-9]*$/;

/** Whether a body schema is named (a `$ref` to a component) or raw bytes. */
const namedOrBinary = (schema: Json | undefined) =>
  !!schema && (typeof schema.$ref === 'string' || (schema.type === 'string' && schema.format === 'binary'));

/** A route's path with its parameters unnamed, in either notation: `/a/:id/*` and `/a/{id}/{key}` are `/a/{}/{}`. */
const shape = (path: string) => path.replace(/\{[^}]*\}|:[^/]+|\*/g, '{}');

/**
 * The document's defects: an operation without a summary or an `operationId` (or a repeated or badly formed one), a
 * request or response body that is neither a named schema nor bytes, and any difference between the operations
 * documented and the routes served (`served`: method and URL of each, as the app's `routeTable` and health route; a
 * HEAD that Fastify answers for a documented GET is that GET's).
 */
export function contractProblems(doc: Json, served: readonly { method: string; url: string }[]): string[] {
  const problems: string[] = [];
  const ids = new Map<string, string>();
  const documented = new Set<string>();
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
    for (const [method, op] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      const where = `${method.toUpperCase()} ${path}`;
      documented.add(`${method.toUpperCase()} ${shape(path)}`);
      if (!op.summary) problems.push(`${where}: no summary`);
      if (!op.operationId) problems.push(`${where}: no operationId`);
      else {
        if (!OPERATION_ID.test(op.operationId))
          problems.push(`${where}: operationId ${op.operationId} is not verbNoun`);
        const twin = ids.get(op.operationId);
        if (twin) problems.push(`${where}: operationId ${op.operationId} is also ${twin}'s`);
        ids.set(op.operationId, where);
      }
      for (const [type, media] of Object.entries(op.requestBody?.content ?? {})) {
        if (!namedOrBinary(media.schema)) problems.push(`${where}: request body (${type}) is not a named schema`);
      }
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        for (const [type, media] of Object.entries(response.content ?? {})) {
          if (!namedOrBinary(media.schema)) problems.push(`${where}: ${status} (${type}) is not a named schema`);
        }
      }
    }
  }
  const servedKeys = new Set(served.map((r) => `${r.method.toUpperCase()} ${shape(r.url)}`));
  for (const key of servedKeys) {
    const headOfGet = key.startsWith('HEAD ') && documented.has(key.replace(/^HEAD/, 'GET'));
    if (!documented.has(key) && !headOfGet) problems.push(`${key}: served but not documented`);
  }
  for (const key of documented) if (!servedKeys.has(key)) problems.push(`${key}: documented but not served`);
  return problems;
}
