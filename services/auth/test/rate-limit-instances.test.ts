import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, GOOD_PASSWORD, registerAndLogin, startAuth, type TestAuth, testConfig } from './helpers.ts';

// Two instances of the service behind one load balancer: each app has its own context (and limiter) over the
// same database, as two processes would.
const config = testConfig({
  server: { trusted_proxies: ['127.0.0.1'] },
  rate_limit: { enabled: true, login_per_ip: '4/1m', login_per_account: '3/15m', refresh_per_ip: '1000/1m' },
});
let database: Awaited<ReturnType<typeof freshDatabase>>;
let a: TestAuth;
let b: TestAuth;

beforeAll(async () => {
  database = await freshDatabase();
  a = await startAuth(database.db, config);
  b = await startAuth(database.db, config);
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await database?.close();
});

const from = (ip: string) => ({ remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': ip } });

describe('rate limits across instances', () => {
  it('count one window for a client whose requests alternate between two instances', async () => {
    const { email } = await registerAndLogin(a.app, { ip: '198.51.100.240' });
    const ip = '203.0.113.40';
    const login = (auth: TestAuth, password: string) =>
      auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password }, ...from(ip) });
    expect((await login(a, GOOD_PASSWORD)).statusCode).toBe(200);
    expect((await login(b, GOOD_PASSWORD)).statusCode).toBe(200);
    expect((await login(a, GOOD_PASSWORD)).statusCode).toBe(200);
    expect((await login(b, GOOD_PASSWORD)).statusCode).toBe(200);
    // Each instance saw two logins, fewer than the limit of 4; together they saw 4.
    for (const auth of [a, b]) {
      const limited = await login(auth, GOOD_PASSWORD);
      expect(limited.statusCode).toBe(429);
      expect(limited.json().code).toBe('RATE_LIMITED');
      expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    }
  });

  it('count failed logins of one account on every instance', async () => {
    const { email } = await registerAndLogin(b.app, { ip: '198.51.100.241' });
    const login = (auth: TestAuth, password: string, i: number) =>
      auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email, password },
        ...from(`192.0.2.${120 + i}`),
      });
    expect((await login(a, 'wrong passphrase', 1)).statusCode).toBe(401);
    expect((await login(b, 'wrong passphrase', 2)).statusCode).toBe(401);
    expect((await login(a, 'wrong passphrase', 3)).statusCode).toBe(401);
    expect((await login(b, GOOD_PASSWORD, 4)).statusCode).toBe(429);
  });

  it('let exactly the limit through when both instances are hit at once', async () => {
    const ip = '203.0.113.41';
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 ? a : b).app.inject({
          method: 'POST',
          url: '/api/v1/auth/login',
          payload: { email: `nobody-${i}@example.com`, password: 'x'.repeat(10) },
          ...from(ip),
        }),
      ),
    );
    const statuses = results.map((r) => r.statusCode).sort();
    expect(statuses.filter((s) => s === 401)).toHaveLength(4);
    expect(statuses.filter((s) => s === 429)).toHaveLength(6);
  });
});
