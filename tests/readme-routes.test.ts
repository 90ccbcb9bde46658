/**
 * Routes served = routes documented: every operation of each service's OpenAPI document (the committed
 * `openapi.json`, which the service's own test keeps equal to what it serves) is a row of its README's endpoint
 * table, and every row of that table is an operation the service has (besides the always-public docs and metrics
 * pages, which the document leaves out).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const SERVICES = ['auth', 'storage', 'provider-registry', 'billing'];
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'];
/** Served by every service outside its OpenAPI document (docs/conventions.md). */
const INFRA = new Set(['/docs', '/docs/json', '/redoc', '/metrics']);

/** `GET /a/{}/b`: parameter names dropped, since a README may spell `{objectKey...}` where the document has `{objectKey}`. */
const operation = (method: string, route: string) => `${method.toUpperCase()} ${route.replace(/\{[^}]*\}/g, '{}')}`;

function documented(service: string): Set<string> {
  const doc = JSON.parse(readFileSync(path.join(root, 'services', service, 'openapi.json'), 'utf8')) as {
    paths: Record<string, Record<string, unknown>>;
  };
  return new Set(
    Object.entries(doc.paths).flatMap(([route, ops]) =>
      Object.keys(ops)
        .filter((m) => METHODS.includes(m.toUpperCase()))
        .map((m) => operation(m, route)),
    ),
  );
}

/**
 * The README's endpoint rows: a table row whose first cell holds only HTTP methods (`GET`, `PUT, GET`, `GET · PUT`)
 * and whose second cell names one or more paths in backticks. A path written without the document's common prefix
 * (billing's tables leave out `/api/v1`) is matched with it.
 */
function inReadme(service: string, served: Set<string>): { rows: Set<string>; unknown: string[] } {
  const text = readFileSync(path.join(root, 'services', service, 'README.md'), 'utf8');
  const rows = new Set<string>();
  const unknown: string[] = [];
  for (const line of text.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    if (cells.length < 4 || cells[0] !== '') continue;
    const methods = cells[1]!.split(/[\s,·/]+/).filter(Boolean);
    if (methods.length === 0 || !methods.every((m) => METHODS.includes(m))) continue;
    // A path's query (`/clients?limit=&cursor=`) is not part of it; "(also under `/prefix/`)" serves it there too.
    const paths = [...cells[2]!.matchAll(/`(\/[^`\s]*)`/g)].map((m) => m[1]!.split('?')[0]!);
    const under = /\(also under `([^`]+)`\)/.exec(cells[2]!);
    if (under) paths.splice(paths.indexOf(under[1]!), 1, `${under[1]!.replace(/\/$/, '')}${paths[0]}`);
    for (const method of methods) {
      for (const route of paths) {
        if (INFRA.has(route)) continue;
        const op = [operation(method, route), operation(method, `/api/v1${route}`)].find((o) => served.has(o));
        if (op) rows.add(op);
        else unknown.push(operation(method, route));
      }
    }
  }
  return { rows, unknown };
}

describe.each(SERVICES)('%s README', (service) => {
  const served = documented(service);
  const { rows, unknown } = inReadme(service, served);

  it('lists every operation of its OpenAPI document in its endpoint table', () => {
    expect(served.size).toBeGreaterThan(3);
    expect([...served].filter((op) => !rows.has(op)).sort()).toEqual([]);
  });

  it('lists no operation the service does not have', () => {
    expect(unknown.sort()).toEqual([]);
  });
});
