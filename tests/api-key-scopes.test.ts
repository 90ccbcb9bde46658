/**
 * A key that lacks a route's scope hears 403 `INSUFFICIENT_SCOPE` on every route of every service, roles or not
 * (docs/conventions.md, "Tokens and access"): the scope is checked before the role, so a renter's key without
 * `machines` is told what it lacks on a provider's route, not that its user is no provider. Table-driven over every
 * operation of the four committed OpenAPI documents that takes a token: each is called with a real key's token (made
 * and exchanged at the real auth service, verified by each service through auth's JWKS) whose one scope does not open
 * it.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type App, SCOPES, type Scope } from '@gpu/common';
import { uninjected } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerAndLogin } from '../services/auth/test/helpers.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { startService, type TestService } from '../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;
let storage: TestService;
/** A token of a key holding just that scope, of a user with the renter role only. */
const keyTokens = {} as Record<Scope, string>;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  storage = await startService({
    settings: {
      access: {
        jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
        issuer: platform.auth.config.jwt.issuer,
        audience: platform.auth.config.jwt.audience,
      },
    },
  });
  const { tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
  for (const scope of SCOPES) {
    const made = await platform.auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: { authorization: `Bearer ${tokens.access_token}` },
      payload: { name: `only-${scope.replace(':', '-')}`, scopes: [scope] },
    });
    expect(made.statusCode, made.body).toBe(201);
    const exchanged = await platform.auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/token',
      payload: { grant_type: 'api_key', api_key: made.json().api_key },
    });
    expect(exchanged.statusCode, exchanged.body).toBe(200);
    keyTokens[scope] = exchanged.json().access_token;
  }
});
afterAll(async () => {
  await billing?.close();
  await storage?.close();
});

interface Operation {
  method: string;
  /** The document's path template (`/wallet/{walletID}`). */
  template: string;
  /** The scopes that open it (`x-api-key-scope`); none: it takes no API key. */
  scopes: Scope[];
}

/** Every operation of a service's committed document that needs a token. */
function operations(folder: string): Operation[] {
  const doc = JSON.parse(
    readFileSync(path.join(import.meta.dirname, '..', 'services', folder, 'openapi.json'), 'utf8'),
  );
  const ops: Operation[] = [];
  for (const [template, item] of Object.entries(doc.paths as Record<string, Record<string, Record<string, unknown>>>)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'head', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      // Public operations, and those where a token is optional, are not the point here.
      if (Array.isArray(op.security)) continue;
      const scope = op['x-api-key-scope'] as string | undefined;
      ops.push({ method: method.toUpperCase(), template, scopes: (scope?.split(' ') ?? []) as Scope[] });
    }
  }
  return ops;
}

/** A scope whose key the operation does not take (`read` opens every GET and HEAD that takes keys). */
function lackingScope(op: Operation): Scope {
  const reads = op.method === 'GET' || op.method === 'HEAD';
  const scope = SCOPES.find((s) => !op.scopes.includes(s) && !(s === 'read' && reads && op.scopes.length > 0));
  if (!scope) throw new Error(`every scope opens ${op.method} ${op.template}`);
  return scope;
}

/** The path with each parameter filled in (access is decided before parameters are validated). */
const pathOf = (template: string) => template.replace(/\{[^}]+\}/g, () => randomUUID());

describe('a key without the scope of a route', () => {
  it('hears 403 INSUFFICIENT_SCOPE on every operation of every service, role-gated ones included', async () => {
    const services: Array<[string, () => App]> = [
      ['auth', () => platform.auth.app],
      ['provider-registry', () => platform.registry.app as App],
      ['billing', () => billing.app as App],
      ['storage', () => storage.app as App],
    ];
    const answers: string[] = [];
    const expected: string[] = [];
    let roleGated = 0;
    for (const [folder, app] of services) {
      for (const op of operations(folder)) {
        const scope = lackingScope(op);
        const res = await uninjected(app())({
          method: op.method as 'GET',
          url: pathOf(op.template),
          headers: { authorization: `Bearer ${keyTokens[scope]}` },
        });
        const code = op.method === 'HEAD' ? '' : ((res.json() as { code?: string }).code ?? '');
        const line = `${folder} ${op.method} ${op.template} with a key of ${scope}:`;
        answers.push(`${line} ${res.statusCode} ${code}`.trim());
        expected.push(`${line} 403${op.method === 'HEAD' ? '' : ' INSUFFICIENT_SCOPE'}`);
        if (res.statusCode === 403 && code === 'ROLE_REQUIRED') roleGated += 1;
      }
    }
    expect(answers).toEqual(expected);
    expect(roleGated).toBe(0);
    // The table covers the four services' protected operations, not a handful.
    expect(answers.length).toBeGreaterThan(60);
  });

  it('still hears ROLE_REQUIRED where it holds the scope but its user lacks the role', async () => {
    // A renter's key with `machines` on a provider's route: the scope is there, the role is not.
    const res = await uninjected(platform.registry.app as App)({
      method: 'POST',
      url: '/providers',
      headers: { authorization: `Bearer ${keyTokens.machines}` },
    });
    expect({ status: res.statusCode, code: res.json().code }).toEqual({ status: 403, code: 'ROLE_REQUIRED' });
  });
});
