/** Test harness: an auth app over a fresh, migrated database on the real test PostgreSQL. */
import { type App, createLogger, migrateToLatest, openDatabase } from '@gpu/common';
import { captureLogs, createTestDatabase, type TestDatabase } from '@gpu/common/testing';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll } from 'vitest';
import { buildApp } from '../src/app.ts';
import { type AuthConfig, authConfigSchema } from '../src/config.ts';
import { createAuthContext } from '../src/context-factory.ts';
import { migrations } from '../src/db/migrations/index.ts';
import type { AuthDatabase } from '../src/db/schema.ts';
import type { AuthContext } from '../src/domain/context.ts';

export const SECRET = 'test-secret-of-at-least-thirty-two-characters!';

/** A password that passes the policy. */
export const GOOD_PASSWORD = 'correct horse battery staple';

export interface TestAuth {
  app: App;
  ctx: AuthContext;
  config: AuthConfig;
  db: Kysely<AuthDatabase>;
  logs: ReturnType<typeof captureLogs>;
  close(): Promise<void>;
}

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> | T[K] : T[K] | string };

function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const cur = out[k];
    out[k] =
      cur && typeof cur === 'object' && !Array.isArray(cur) && v && typeof v === 'object' && !Array.isArray(v)
        ? merge(cur as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

/**
 * The test configuration: HS256 with a fixed secret (tests forge and expire tokens with it; jwks.test.ts covers
 * the asymmetric default), rate limits off unless asked for.
 */
export function testConfig(overrides: DeepPartial<Record<string, unknown>> = {}): AuthConfig {
  const base = {
    environment: 'test',
    log_level: 'info',
    jwt: { algorithm: 'HS256', secret_key: SECRET },
    rate_limit: { enabled: false },
  };
  return authConfigSchema.parse(merge(base, overrides as Record<string, unknown>));
}

/** Opens (and migrates) a fresh database: one per test file. */
export async function freshDatabase(): Promise<{
  test: TestDatabase;
  db: Kysely<AuthDatabase>;
  close(): Promise<void>;
}> {
  const test = await createTestDatabase('auth');
  const database = await openDatabase<AuthDatabase>({ url: test.url, poolSize: 20 });
  await migrateToLatest(database.db as Kysely<unknown>, 'auth-service', migrations);
  return {
    test,
    db: database.db,
    close: async () => {
      await database.close();
      await test.drop();
    },
  };
}

/** Builds an auth app over `db` (not owned: closing the app leaves the database open). */
export async function startAuth(db: Kysely<AuthDatabase>, config: AuthConfig = testConfig()): Promise<TestAuth> {
  const logs = captureLogs();
  const logger = createLogger({
    service: 'auth-service',
    instanceId: 't',
    level: config.log_level,
    destination: logs.destination,
  });
  const ctx = await createAuthContext(config, logger, db);
  const app = await buildApp(ctx);
  await app.ready();
  return {
    app,
    ctx,
    config,
    db,
    logs,
    close: async () => {
      await app.close();
      await ctx.mailer.close();
    },
  };
}

/**
 * Opens a fresh database and an auth app over it in `beforeAll` and closes both
 * in `afterAll`, for the file it is called in; returns the app. The returned
 * object is filled in when `beforeAll` runs, so use it from tests and hooks only.
 */
export function useAuth(config?: AuthConfig): TestAuth {
  const handle = {} as TestAuth;
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  let auth: TestAuth | undefined;
  beforeAll(async () => {
    database = await freshDatabase();
    auth = await startAuth(database.db, config);
    Object.assign(handle, auth);
  });
  afterAll(async () => {
    await auth?.close();
    await database?.close();
  });
  return handle;
}

let counter = 0;
/** A unique email for one test. */
export function uniqueEmail(prefix = 'user'): string {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now()}-${counter}@example.com`;
}

/** Registers a user and logs in; returns the token pair and the user. */
export async function registerAndLogin(
  app: App,
  opts: { email?: string; password?: string; roles?: string[]; ip?: string } = {},
) {
  const email = opts.email ?? uniqueEmail();
  const password = opts.password ?? GOOD_PASSWORD;
  const reg = await app.inject({
    method: 'POST',
    url: '/api/v1/auth/register',
    payload: { email, password, ...(opts.roles ? { roles: opts.roles } : {}) },
    remoteAddress: opts.ip,
  });
  if (reg.statusCode !== 201) throw new Error(`register failed: ${reg.statusCode} ${reg.body}`);
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/auth/login',
    payload: { email, password },
    remoteAddress: opts.ip,
  });
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`);
  return {
    email,
    password,
    user: reg.json().user as { id: string; email: string; roles: string[] },
    tokens: res.json() as { access_token: string; refresh_token: string; token_type: string; expires_in: number },
  };
}

/** The JSON payload of a JWT, unverified (for asserting claims). */
export function decodeJwt(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
