/**
 * `pnpm bench auth`: login throughput against raw argon2id hashing, and
 * bearer-token verification through a protected route against a bare route.
 * Writes the `auth` section of docs/benchmarks.md (BENCH_ONLY=1 only prints it).
 * The auth service runs as configured in production (access control on; it
 * verifies its own tokens with its own keys); the routes measured on it,
 * register and login, are public. The tokens verified are the ones it issues:
 * HS256, and EdDSA (the platform default) verified through its JWKS over HTTP,
 * as every other service does. BENCH_SECONDS and BENCH_ROUNDS shorten a trial run.
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { type App, createLogger, migrateToLatest, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import argon2 from 'argon2';
import type { Kysely } from 'kysely';
import { buildApp } from '../src/app.ts';
import { authConfigSchema } from '../src/config.ts';
import { createAuthContext } from '../src/context-factory.ts';
import { migrations } from '../src/db/migrations/index.ts';
import type { AuthDatabase } from '../src/db/schema.ts';
import { runLoad } from './load.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
/** Compared measurements alternate this many times, so a change in machine load hits both sides alike. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const HASH_CONCURRENCY = 4; // libuv's default thread pool, where argon2 runs
const HTTP_CONCURRENCY = 32;
/** Logins in flight: twice the hashing threads, so a thread never waits while a login waits on the database. */
const LOGIN_CONCURRENCY = 2 * HASH_CONCURRENCY;
const SECRET = 'benchmark-secret-of-at-least-32-characters';
const PASSWORD = 'correct horse battery staple';
const ARGON2 = { type: argon2.argon2id, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

async function rawHashes(): Promise<{ count: number; seconds: number }> {
  let done = 0;
  const deadline = performance.now() + SECONDS * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: HASH_CONCURRENCY }, async () => {
      while (performance.now() < deadline) {
        await argon2.hash(PASSWORD, ARGON2);
        done++;
      }
    }),
  );
  return { count: done, seconds: (performance.now() - started) / 1000 };
}

async function startAuth(db: Kysely<AuthDatabase>, jwt: Record<string, unknown>): Promise<{ app: App; url: string }> {
  const config = authConfigSchema.parse({
    environment: 'test',
    log_level: 'warn',
    jwt,
    rate_limit: { enabled: false },
  });
  const logger = createLogger({ service: 'auth-service', instanceId: 'bench', level: 'warn' });
  const app = await buildApp(await createAuthContext(config, logger, db));
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url };
}

async function post(url: string, body: unknown): Promise<Record<string, string>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.status === 204 ? {} : ((await res.json()) as Record<string, string>);
}

/** Raw hashing and logins, alternated ROUNDS times; returns both rates. */
async function hashesVsLogins(url: string): Promise<{ hashes: number; logins: number }> {
  const emails = Array.from({ length: 16 }, (_, i) => `bench-${i}@example.com`);
  for (const email of emails) await post(`${url}/api/v1/auth/register`, { email, password: PASSWORD });
  let i = 0;
  const body = () => JSON.stringify({ email: emails[i++ % emails.length], password: PASSWORD });
  const login = (durationMs: number) =>
    runLoad({ url: `${url}/api/v1/auth/login`, method: 'POST', body, concurrency: LOGIN_CONCURRENCY, durationMs });
  await login(1000);
  const totals = { hashes: 0, hashSeconds: 0, logins: 0, loginSeconds: 0 };
  for (let round = 0; round < ROUNDS; round++) {
    const h = await rawHashes();
    totals.hashes += h.count;
    totals.hashSeconds += h.seconds;
    const l = await login(SECONDS * 1000);
    if (l.ok !== l.requests) throw new Error(`login: ${l.requests - l.ok} requests failed`);
    totals.logins += l.ok;
    totals.loginSeconds += l.seconds;
  }
  return { hashes: totals.hashes / totals.hashSeconds, logins: totals.logins / totals.loginSeconds };
}

const VERIFY_SERVER = fileURLToPath(new URL('./verify-server.ts', import.meta.url));

/** Bare vs protected route throughput on a verification server in a child process. */
async function verification(options: Record<string, unknown>, token: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', VERIFY_SERVER, JSON.stringify(options)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`verify server exited with ${code}`)));
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    const headers = { authorization: `Bearer ${token}` };
    // The protected route verifies: it refuses a request without a token and accepts this one.
    const anonymous = (await fetch(`${base}/protected`)).status;
    const verified = (await fetch(`${base}/protected`, { headers })).status;
    if (anonymous !== 401 || verified !== 200) {
      throw new Error(`protected route: ${anonymous} without a token (401 expected), ${verified} with one`);
    }
    const run = (path: string, durationMs: number) =>
      runLoad({ url: `${base}${path}`, headers, concurrency: HTTP_CONCURRENCY, durationMs });
    await run('/bare', 1000);
    await run('/protected', 1000);
    const totals = { bare: 0, bareSeconds: 0, protected: 0, protectedSeconds: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      const bare = await run('/bare', SECONDS * 1000);
      const guarded = await run('/protected', SECONDS * 1000);
      if (guarded.ok !== guarded.requests) throw new Error('protected route refused the token');
      if (bare.ok !== bare.requests) throw new Error('bare route failed');
      totals.bare += bare.ok;
      totals.bareSeconds += bare.seconds;
      totals.protected += guarded.ok;
      totals.protectedSeconds += guarded.seconds;
    }
    return { bare: totals.bare / totals.bareSeconds, protected: totals.protected / totals.protectedSeconds };
  } finally {
    child.kill('SIGTERM');
  }
}

const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: n < 100 ? 1 : 0 });
const verdict = (ratio: number, target: number) => (ratio >= target ? 'meets' : 'misses');

const testDb = await createTestDatabase('authbench');
const database = await openDatabase<AuthDatabase>({ url: testDb.url, poolSize: 20 });
try {
  await migrateToLatest(database.db as Kysely<unknown>, 'auth-service', migrations);
  const loadBefore = os.loadavg()[0]!;
  const hs = await startAuth(database.db, { algorithm: 'HS256', secret_key: SECRET });
  process.stdout.write('raw argon2id hashes vs logins...\n');
  const { hashes, logins } = await hashesVsLogins(hs.url);
  const tokens = await post(`${hs.url}/api/v1/auth/login`, { email: 'bench-0@example.com', password: PASSWORD });
  await hs.app.close();

  const eddsaKey = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const ed = await startAuth(database.db, { algorithm: 'EdDSA', private_key: eddsaKey });
  const edTokens = await post(`${ed.url}/api/v1/auth/login`, { email: 'bench-0@example.com', password: PASSWORD });
  const common = { issuer: 'gpu-platform-auth', audience: 'gpu-platform' };
  const cases = [
    {
      name: 'HS256, verified-token cache on (default)',
      options: { ...common, secret: SECRET },
      token: tokens.access_token!,
    },
    {
      name: 'HS256, cache off (signature checked every request)',
      options: { ...common, secret: SECRET, cacheSize: 0 },
      token: tokens.access_token!,
    },
    {
      name: 'EdDSA via remote JWKS, cache on (the platform default)',
      options: { ...common, jwksUrl: `${ed.url}/.well-known/jwks.json` },
      token: edTokens.access_token!,
      target: 0.9,
    },
    {
      name: 'EdDSA via remote JWKS, cache off',
      options: { ...common, jwksUrl: `${ed.url}/.well-known/jwks.json`, cacheSize: 0 },
      token: edTokens.access_token!,
    },
  ];
  const rows: string[] = [];
  for (const c of cases) {
    process.stdout.write(`verification: ${c.name}...\n`);
    const r = await verification(c.options, c.token);
    const ratio = r.protected / r.bare;
    const target = c.target ?? 0.7;
    rows.push(
      `| ${c.name} | ${fmt(r.bare)} | ${fmt(r.protected)} | **${ratio.toFixed(2)}x** | ≥ ${target}x | ${verdict(ratio, target)} |`,
    );
  }
  await ed.app.close();

  const loginRatio = logins / hashes;
  const markdown = `## auth

${machineLine()}

Run with \`pnpm bench auth\`: compared measurements alternate ${ROUNDS} times, ${SECONDS} s each, after a 1 s warm-up; PostgreSQL of the test environment on the same machine; rate limits off. 1-minute load average before / after: ${loadBefore.toFixed(1)} / ${os.loadavg()[0]!.toFixed(1)} on ${os.cpus().length} cores.

**Login vs raw argon2id** (m=19456 KiB, t=2, p=1; raw hashes ${HASH_CONCURRENCY} at a time, the size of libuv's thread pool where argon2 runs; logins ${LOGIN_CONCURRENCY} in flight; login = HTTP request, user lookup, argon2id verify, refresh-token insert, JWT signing):

| measurement | per second | ratio | target | result |
|---|---|---|---|---|
| raw \`argon2.hash\` | ${fmt(hashes)} | 1.00x | | |
| \`POST /api/v1/auth/login\` | ${fmt(logins)} | **${loginRatio.toFixed(2)}x** | ≥ 0.9x | ${verdict(loginRatio, 0.9)} |

**Bearer-token verification** (the access control of @gpu/common's \`createApp\` on a protected route vs a public route of the same app, ${HTTP_CONCURRENCY} keep-alive connections, server in its own process):

| verifier | bare route req/s | protected route req/s | ratio | target | result |
|---|---|---|---|---|---|
${rows.join('\n')}
`;
  writeBenchSection('auth', markdown);
  process.stdout.write(`${markdown}\n`);
} finally {
  await database.close();
  await testDb.drop();
}
