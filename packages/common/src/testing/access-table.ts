/**
 * The table-driven authorization test every service runs: each of its routes
 * (read from the app, so a new route without a rule fails the test) is called
 * by every kind of caller, and the status must be the one the service's access
 * table promises.
 *
 *   const callers = await accessCallers(issuer);
 *   const report = await checkAccessTable(app, callers, {
 *     'GET /wallet/:walletID': { request: async (c) => ({ url: `/wallet/${await walletOf('owner')}` }),
 *                                expect: { owner: 200, admin: 200, service: 200, others: 404 } },
 *   });
 *   expect(report).toEqual({ unlisted: [], unknown: [], mismatches: [] });
 *
 * Anonymous, forged and expired tokens get 401 on every route that is not
 * public unless a rule says otherwise; `others` covers every caller a rule
 * does not name.
 */
import type { FastifyInstance, InjectOptions } from 'fastify';
import type { RouteEntry } from '../http/app.ts';
import { type TestIssuer, uninjected } from './issuer.ts';

export const CALLERS = [
  'anonymous',
  'forged',
  'expired',
  'owner',
  'other_user',
  'renter',
  'admin',
  'service',
  'gateway',
  'scheduler',
  'daemon',
  'other_daemon',
] as const;
export type CallerName = (typeof CALLERS)[number];

export interface TableCaller {
  name: CallerName;
  /** The user or client ID; for daemons the client ID (their owner is in `actsFor`). */
  id: string;
  actsFor?: string;
  headers: Record<string, string>;
}

/**
 * The callers, from one issuer:
 * - `owner`: a user with the provider and renter roles who owns the resources a rule makes;
 * - `other_user`: another user with the same roles, owning nothing the rule makes;
 * - `renter`: a user with the renter role only; `admin`: an admin;
 * - `service`, `gateway`, `scheduler`: machine clients; `daemon` acts for `owner`, `other_daemon` for `other_user`;
 * - `anonymous` (no token), `forged` (signed by a key the JWKS does not hold), `expired`.
 */
export async function accessCallers(issuer: TestIssuer): Promise<Record<CallerName, TableCaller>> {
  const owner = await issuer.user(['provider', 'renter']);
  const other = await issuer.user(['provider', 'renter']);
  const now = Math.floor(Date.now() / 1000);
  const as = (name: CallerName, c: { id: string; headers: Record<string, string> }, actsFor?: string) => ({
    name,
    id: c.id,
    actsFor,
    headers: c.headers,
  });
  const daemon = await issuer.client('daemon', owner.id);
  const otherDaemon = await issuer.client('daemon', other.id);
  const forged = await issuer.sign({ sub: owner.id, roles: ['admin'] }, { forged: true });
  const expired = await issuer.sign({ sub: owner.id, roles: ['provider', 'renter'], iat: now - 7200, exp: now - 3600 });
  return {
    anonymous: { name: 'anonymous', id: crypto.randomUUID(), headers: {} },
    forged: { name: 'forged', id: owner.id, headers: { authorization: `Bearer ${forged}` } },
    expired: { name: 'expired', id: owner.id, headers: { authorization: `Bearer ${expired}` } },
    owner: as('owner', owner, owner.id),
    other_user: as('other_user', other, other.id),
    renter: as('renter', await issuer.user(['renter'])),
    admin: as('admin', await issuer.user(['admin'])),
    service: as('service', await issuer.client('service')),
    gateway: as('gateway', await issuer.client('gateway')),
    scheduler: as('scheduler', await issuer.client('scheduler')),
    daemon: as('daemon', daemon, owner.id),
    other_daemon: as('other_daemon', otherDaemon, other.id),
  };
}

export interface AccessRule {
  /** The request a caller makes; create the resources it touches here (owned by the `owner` caller). */
  request: (caller: TableCaller) => Promise<Partial<InjectOptions>> | Partial<InjectOptions>;
  /** The status each caller gets; `others` for callers not named (401 for anonymous/forged/expired by default). */
  expect: Partial<Record<CallerName | 'others', number>>;
  /** The route needs no token (anonymous callers are judged by `expect` like the rest). */
  public?: boolean;
}

export interface AccessReport {
  /** Routes of the app without a rule. */
  unlisted: string[];
  /** Rules for routes the app does not have. */
  unknown: string[];
  /** `ROUTE caller: expected X, got Y (code)`. */
  mismatches: string[];
}

/** `METHOD /url` of every route the app serves, without the platform's own (health, metrics, docs). */
export function routeKeys(app: FastifyInstance): string[] {
  const routes = (app as { routeTable?: readonly RouteEntry[] }).routeTable ?? [];
  return routes.map((r) => `${r.method} ${r.url}`);
}

const UNAUTHENTICATED: CallerName[] = ['anonymous', 'forged', 'expired'];

/** Runs every rule for every caller; the report lists what differs from the table. */
export async function checkAccessTable(
  app: FastifyInstance,
  callers: Record<CallerName, TableCaller>,
  table: Record<string, AccessRule>,
): Promise<AccessReport> {
  const served = new Set(routeKeys(app));
  const unlisted = [...served].filter((k) => !(k in table) && !(k.startsWith('HEAD ') && `GET ${k.slice(5)}` in table));
  const unknown = Object.keys(table).filter((k) => !served.has(k));
  const mismatches: string[] = [];
  for (const [key, rule] of Object.entries(table)) {
    const [method, url] = key.split(' ') as [string, string];
    for (const name of CALLERS) {
      const caller = callers[name];
      const expected = rule.expect[name] ?? (!rule.public && UNAUTHENTICATED.includes(name) ? 401 : rule.expect.others);
      if (expected === undefined) {
        mismatches.push(`${key} ${name}: no expected status in the table`);
        continue;
      }
      const req = await rule.request(caller);
      const res = await uninjected(app)({
        method: method as InjectOptions['method'],
        url: req.url ?? url,
        ...req,
        headers: { ...caller.headers, ...(req.headers as Record<string, string>) },
      } as InjectOptions);
      if (res.statusCode !== expected) {
        let code = '';
        try {
          code = (res.json() as { code?: string }).code ?? '';
        } catch {}
        mismatches.push(`${key} ${name}: expected ${expected}, got ${res.statusCode}${code ? ` ${code}` : ''}`);
      }
    }
  }
  return { unlisted, unknown, mismatches };
}
