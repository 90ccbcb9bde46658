import { describe, expect, it } from 'vitest';
import { GOOD_PASSWORD, registerAndLogin, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const auth = useAuth(
  testConfig({
    server: { trusted_proxies: ['127.0.0.1'] },
    rate_limit: {
      enabled: true,
      login_per_ip: '5/1m',
      login_per_account: '3/15m',
      register_per_ip: '4/1h',
      register_per_account: '2/1h',
      refresh_per_ip: '3/1m',
      refresh_per_account: '100/1m',
    },
  }),
);

/** Requests through the trusted proxy, from the given client address. */
const from = (ip: string) => ({ remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': ip } });

const expect429 = (res: { statusCode: number; headers: Record<string, unknown>; json(): { code: string } }) => {
  expect(res.statusCode).toBe(429);
  expect(res.json().code).toBe('RATE_LIMITED');
  expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
};

describe('rate limits', () => {
  it('limits login attempts per client IP', async () => {
    const ip = '203.0.113.10';
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.250' });
    for (let i = 0; i < 5; i++) {
      const res = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: uniqueEmail(), password: 'x'.repeat(10) },
        ...from(ip),
      });
      expect(res.statusCode).toBe(401);
    }
    const limited = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
      ...from(ip),
    });
    expect429(limited);
    expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(60);
    const otherIp = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
      ...from('203.0.113.11'),
    });
    expect(otherIp.statusCode).toBe(200);
  });

  it('limits failed logins per account, from any IP, for known and unknown emails alike', async () => {
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.251' });
    const unknown = uniqueEmail('ghost');
    for (const target of [email, unknown]) {
      for (let i = 0; i < 3; i++) {
        const res = await auth.app.inject({
          method: 'POST',
          url: '/api/v1/auth/login',
          payload: { email: target, password: 'wrong passphrase' },
          ...from(`192.0.2.${i + 1}`),
        });
        expect(res.statusCode).toBe(401);
      }
      const limited = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: target, password: GOOD_PASSWORD },
        ...from('192.0.2.99'),
      });
      expect429(limited);
      expect(Number(limited.headers['retry-after'])).toBeGreaterThan(60);
    }
  });

  it('does not lock the owner out: a client that logged in before keeps logging in while the account is locked', async () => {
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.253' });
    const first = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
      ...from('198.51.100.254'),
    });
    const deviceToken = first.json().device_token as string;
    expect(deviceToken).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // Someone else guesses from many addresses until the account is locked for unknown clients.
    for (let i = 0; i < 4; i++) {
      await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email, password: 'wrong passphrase' },
        ...from(`192.0.2.${120 + i}`),
      });
    }
    const stranger = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
      ...from('192.0.2.130'),
    });
    expect429(stranger);
    const owner = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD, device_token: deviceToken },
      ...from('198.51.100.254'),
    });
    expect(owner.statusCode).toBe(200);
    expect(owner.json().device_token).toBe(deviceToken);
    // The login wrote the device's use with its refresh token: a device row per login without a device token (the
    // registration's and the first), the first one's used again just now, and a refresh token per successful login.
    const devices = await auth.ctx.db
      .selectFrom('trusted_devices')
      .innerJoin('users', 'users.id', 'trusted_devices.user_id')
      .select(['trusted_devices.created_at', 'trusted_devices.last_used_at'])
      .where('users.email', '=', email)
      .orderBy('trusted_devices.created_at')
      .execute();
    expect(devices).toHaveLength(2);
    expect(new Date(devices[0]!.last_used_at).getTime()).toBe(new Date(devices[0]!.created_at).getTime());
    expect(new Date(devices[1]!.last_used_at).getTime()).toBeGreaterThan(new Date(devices[1]!.created_at).getTime());
    const tokens = await auth.ctx.db
      .selectFrom('refresh_tokens')
      .innerJoin('users', 'users.id', 'refresh_tokens.user_id')
      .select('refresh_tokens.id')
      .where('users.email', '=', email)
      .execute();
    expect(tokens).toHaveLength(3);
    // A device token is the account's: it does not unlock another account, and it has a limit of its own.
    const { email: otherEmail } = await registerAndLogin(auth.app, { ip: '198.51.100.249' });
    for (let i = 0; i < 3; i++) {
      await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: otherEmail, password: 'wrong passphrase' },
        ...from(`192.0.2.${140 + i}`),
      });
    }
    expect429(
      await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: otherEmail, password: GOOD_PASSWORD, device_token: deviceToken },
        ...from('198.51.100.254'),
      }),
    );
  });

  it('limits registrations per IP and per email', async () => {
    const email = uniqueEmail();
    const reg = (address: string, mail: string) =>
      auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/register',
        payload: { email: mail, password: GOOD_PASSWORD },
        ...from(address),
      });
    expect((await reg('192.0.2.50', email)).statusCode).toBe(201);
    expect((await reg('192.0.2.51', email)).statusCode).toBe(409);
    expect429(await reg('192.0.2.52', email));
    for (let i = 0; i < 4; i++) expect((await reg('192.0.2.60', uniqueEmail())).statusCode).toBe(201);
    expect429(await reg('192.0.2.60', uniqueEmail()));
  });

  it('limits refreshes per client IP', async () => {
    const ip = '192.0.2.70';
    const { tokens } = await registerAndLogin(auth.app, { ip: '198.51.100.252' });
    let token = tokens.refresh_token;
    for (let i = 0; i < 3; i++) {
      const res = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/refresh',
        payload: { refresh_token: token },
        ...from(ip),
      });
      expect(res.statusCode).toBe(200);
      token = res.json().refresh_token;
    }
    expect429(
      await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/refresh',
        payload: { refresh_token: token },
        ...from(ip),
      }),
    );
  });
});
