/**
 * The README says what the code does: its endpoint table has a row for every operation of the OpenAPI document the
 * service serves, naming every status that operation declares, and its configuration table names every setting of
 * the service's own sections with the default the configuration schema has.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { authConfigSchema, zRate } from '../src/config.ts';
import { useAuth } from './helpers.ts';

const auth = useAuth();
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

/** The rows of the first table under `## <heading>`, as cells (header and separator left out). */
function tableRows(heading: string): string[][] {
  const start = readme.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`no section ${heading}`);
  const end = readme.indexOf('\n## ', start + 1);
  const lines = readme.slice(start, end < 0 ? undefined : end).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .slice(1, -1)
        .split('|')
        .map((c) => c.trim()),
    );
  }
  return rows;
}

/** The backquoted pieces of a cell. */
const quoted = (cell: string) => [...cell.matchAll(/`([^`]*)`/g)].map((m) => m[1]!);

describe('the README', () => {
  it('lists every operation of the OpenAPI document, with every status it declares', async () => {
    const spec = (await auth.app.inject({ url: '/docs/json' })).json() as {
      paths: Record<string, Record<string, { requestBody?: unknown; responses: Record<string, unknown> }>>;
    };
    const rows = tableRows('Endpoints').map(([method, path, , answers]) => {
      const paths = quoted(path!)
        .filter((p) => p.startsWith('/'))
        .map((p) => p.split('?')[0]!);
      const under = /\(also under `([^`]+)`\)/.exec(path!);
      if (under) paths.push(`${under[1]!.replace(/\/$/, '')}${paths[0]}`);
      return { method: method!, paths, answers: answers! };
    });
    const missing: string[] = [];
    for (const [path, operations] of Object.entries(spec.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        const name = `${method.toUpperCase()} ${path}`;
        const row = rows.find((r) => r.method === method.toUpperCase() && r.paths.includes(path));
        if (!row) {
          missing.push(`${name}: no row`);
          continue;
        }
        // 500 and 503 are said once for every route above the table, and 413 and 415 for every route with a body.
        const saidAbove = ['500', '503', ...(operation.requestBody ? ['413', '415'] : [])];
        for (const status of Object.keys(operation.responses)) {
          if (!saidAbove.includes(status) && !new RegExp(`\\b${status}\\b`).test(row.answers)) {
            missing.push(`${name}: ${status} not named`);
          }
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it("names every setting of the service's own sections, with the schema's default", () => {
    const defaults = authConfigSchema.parse({}) as unknown as Record<string, Record<string, unknown> | unknown>;
    const valueAt = (key: string) =>
      key.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], defaults);
    const documented = new Set<string>();
    const wrong: string[] = [];
    for (const [keyCell, , defaultCell] of tableRows('Configuration')) {
      const [first, ...rest] = quoted(keyCell!);
      const section = first!.includes('.') ? first!.slice(0, first!.lastIndexOf('.') + 1) : '';
      const keys = [first!, ...rest.map((k) => (k.includes('.') ? k : section + k))];
      for (const k of keys) documented.add(k);
      // Only literal defaults are compared ("RFC 7638 thumbprint" describes one).
      const literal = defaultCell!.split(' / ').map((d) => (d.trim() === 'empty' ? '' : quoted(d)[0]));
      if (literal.some((d) => d === undefined)) continue;
      const values = literal.length === 1 ? keys.map(() => literal[0]!) : literal;
      keys.forEach((key, i) => {
        const actual = valueAt(key);
        const text = values[i]!;
        const expected =
          typeof actual === 'object' && actual !== null && 'windowMs' in actual
            ? zRate().parse(text)
            : Array.isArray(actual)
              ? text === ''
                ? []
                : text.split(',')
              : typeof actual === 'number'
                ? Number(text)
                : typeof actual === 'boolean'
                  ? text === 'true'
                  : text;
        if (JSON.stringify(actual) !== JSON.stringify(expected)) {
          wrong.push(`${key}: README ${JSON.stringify(text)}, schema ${JSON.stringify(actual)}`);
        }
      });
    }
    expect(wrong).toEqual([]);
    const own = ['environment', 'jwt', 'password', 'rate_limit', 'clients', 'admin'];
    const settings = own.flatMap((section) => {
      const value = defaults[section as keyof typeof defaults];
      return typeof value === 'object' && value !== null ? Object.keys(value).map((k) => `${section}.${k}`) : [section];
    });
    expect(settings.filter((s) => !documented.has(s))).toEqual([]);
  });

  it('says that registering answers no token', async () => {
    const res = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/register',
      payload: { email: `readme-${Date.now()}@example.com`, password: 'a long readme passphrase' },
    });
    expect(res.statusCode).toBe(201);
    expect(res.json().access_token).toBeUndefined();
    const [row] = tableRows('Endpoints').filter(([, path]) => path!.includes('/api/v1/auth/register'));
    expect(row![3]).toMatch(/no token/);
  });
});
