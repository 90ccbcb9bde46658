import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, spawnServer } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { GOOD_PASSWORD } from './helpers.ts';

const SERVER = fileURLToPath(new URL('../src/server.ts', import.meta.url));

const start = (env: Record<string, string>) =>
  spawnServer(SERVER, { env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env } });

async function waitForPort(output: () => string, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const m = /"port":(\d+),"host"/.exec(output());
    if (m) return Number(m[1]);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`server did not start:\n${output()}`);
}

describe('server process', () => {
  it('refuses to start in production without a secret', async () => {
    const proc = start({ APP_ENV: 'production', ALGORITHM: 'HS256' });
    expect((await proc.exited).code).toBe(1);
    expect(proc.output()).toMatch(/start-up failed: invalid configuration: SECRET_KEY/);
  });

  it('starts on PostgreSQL, creates the initial admin, serves, and shuts down gracefully on SIGTERM', async () => {
    const db = await createTestDatabase('authsrv');
    const proc = start({
      APP_ENV: 'production',
      DATABASE_URL: db.url,
      ALGORITHM: 'HS256',
      SECRET_KEY: 'x'.repeat(40),
      // Production wants a mail server; none is asked anything here (registration mails nobody in this test).
      SMTP_URL: 'smtp://127.0.0.1:9',
      ADMIN_EMAIL: 'admin@example.com',
      ADMIN_PASSWORD: GOOD_PASSWORD,
    });
    try {
      const port = await waitForPort(proc.output);
      const base = `http://127.0.0.1:${port}`;
      const health = await fetch(`${base}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({
        status: 'UP',
        service: 'auth-service',
        checks: { database: { status: 'UP' } },
      });
      const login = await fetch(`${base}/api/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: 'admin@example.com', password: GOOD_PASSWORD }),
      });
      expect(login.status).toBe(200);
      expect(proc.output()).toContain('initial admin created');
      expect(proc.output()).not.toContain(GOOD_PASSWORD);
      proc.child.kill('SIGTERM');
      expect((await proc.exited).code).toBe(0);
      expect(proc.output()).toContain('shutdown complete');
    } finally {
      proc.child.kill('SIGKILL');
      await db.drop();
    }
  });

  it('runs on an embedded PGlite database without DATABASE_URL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'auth-pglite-'));
    const proc = start({ AUTH__DATABASE__EMBEDDED_PATH: join(dir, 'db'), ALGORITHM: 'EdDSA' });
    try {
      const port = await waitForPort(proc.output, 60_000);
      const base = `http://127.0.0.1:${port}`;
      const post = (path: string, body: unknown) =>
        fetch(`${base}/api/v1/auth${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      expect(
        (await post('/register', { email: 'lite@example.com', password: GOOD_PASSWORD, roles: ['provider'] })).status,
      ).toBe(201);
      expect((await post('/register', { email: 'LITE@example.com', password: GOOD_PASSWORD })).status).toBe(409);
      const tokens = (await (await post('/login', { email: 'lite@example.com', password: GOOD_PASSWORD })).json()) as {
        refresh_token: string;
      };
      expect((await post('/refresh', { refresh_token: tokens.refresh_token })).status).toBe(200);
      const jwks = (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as { keys: unknown[] };
      expect(jwks.keys).toHaveLength(1);
      expect(proc.output()).toMatch(/a key pair is generated for this run only/);
      // The embedded database's one role is a superuser: auth says it could rewrite its audit trail.
      expect(proc.output()).toMatch(/is a superuser: auth could rewrite its own audit trail/);
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
