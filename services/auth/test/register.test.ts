import { describe, expect, it } from 'vitest';
import { GOOD_PASSWORD, uniqueEmail, useAuth } from './helpers.ts';

const auth = useAuth();

const register = (payload: unknown) =>
  auth.app.inject({ method: 'POST', url: '/api/v1/auth/register', payload: payload as Record<string, unknown> });

describe('POST /api/v1/auth/register', () => {
  it('creates a renter by default and answers 201 with the user and a message', async () => {
    const email = uniqueEmail();
    const res = await register({ email, password: GOOD_PASSWORD });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body.message).toBe('user registered');
    expect(body.user).toMatchObject({ email, roles: ['renter'] });
    expect(body.user.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(body.user.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(body.user.password).toBeUndefined();
    expect(body.user.password_hash).toBeUndefined();
  });

  it("logs the registration on the request's log line: with its request and correlation IDs", async () => {
    const email = uniqueEmail();
    const res = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/register',
      payload: { email, password: GOOD_PASSWORD },
      headers: { 'x-request-id': 'reg-log-1', 'x-correlation-id': 'corr-log-1' },
    });
    expect(res.statusCode).toBe(201);
    const line = auth.logs.lines().find((l) => l.msg === 'user registered' && l.user_id === res.json().user.id);
    expect(line).toMatchObject({ request_id: 'reg-log-1', correlation_id: 'corr-log-1' });
  });

  it('stores only an argon2id hash with at least the OWASP parameters', async () => {
    const email = uniqueEmail();
    await register({ email, password: GOOD_PASSWORD });
    const row = await auth.db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirstOrThrow();
    expect(row.password_hash).toMatch(/^\$argon2id\$v=19\$m=19456,p=1,t=2\$/);
    expect(row.password_hash).not.toContain(GOOD_PASSWORD);
  });

  it('lets a user choose provider and renter, and normalises the email', async () => {
    const email = uniqueEmail('Mixed.Case');
    const res = await register({
      email: `  ${email.toUpperCase()}`.trim(),
      password: GOOD_PASSWORD,
      roles: ['provider', 'renter', 'provider'],
    });
    expect(res.statusCode).toBe(201);
    expect(res.json().user).toMatchObject({ email: email.toLowerCase(), roles: ['provider', 'renter'] });
  });

  it('never grants admin at registration', async () => {
    const res = await register({ email: uniqueEmail(), password: GOOD_PASSWORD, roles: ['renter', 'admin'] });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('ROLE_NOT_SELF_ASSIGNABLE');
  });

  it('answers a duplicate email, in any letter case, with 409', async () => {
    const email = uniqueEmail();
    expect((await register({ email, password: GOOD_PASSWORD })).statusCode).toBe(201);
    const again = await register({ email: email.toUpperCase(), password: 'another good passphrase' });
    expect(again.statusCode).toBe(409);
    expect(again.headers['content-type']).toContain('application/problem+json');
    expect(again.json()).toMatchObject({ code: 'EMAIL_TAKEN', status: 409 });
  });

  it('gives one 201 and one 409 for two registrations of one email at once', async () => {
    const email = uniqueEmail('race');
    const results = await Promise.all([
      register({ email, password: GOOD_PASSWORD }),
      register({ email, password: 'a different passphrase' }),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409]);
    const rows = await auth.db.selectFrom('users').select('id').where('email', '=', email).execute();
    expect(rows).toHaveLength(1);
  });

  it.each([
    ['short', 'PASSWORD_TOO_SHORT', /at least 8 characters/],
    ['x'.repeat(129), 'PASSWORD_TOO_LONG', /at most 128 characters/],
    ['password123', 'PASSWORD_COMMON', /common or breached/],
    ['iloveyou', 'PASSWORD_COMMON', /common or breached/],
    ['Sunshine', 'PASSWORD_COMMON', /common or breached/],
  ])('rejects the password %j with 400 %s', async (password, code, message) => {
    const res = await register({ email: uniqueEmail(), password });
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body.code).toBe(code);
    expect(body.detail).toMatch(message);
    expect(body.errors).toEqual([{ path: 'body.password', message: body.detail }]);
  });

  it('accepts long passphrases of 64 characters and any characters, without composition rules', async () => {
    const passphrase = 'ü'.repeat(32) + ' spaces and 😀 emoji are fine '.padEnd(40, '.');
    expect([...passphrase].length).toBeGreaterThanOrEqual(64);
    const res = await register({ email: uniqueEmail(), password: passphrase });
    expect(res.statusCode).toBe(201);
    const lower = await register({ email: uniqueEmail(), password: 'alllowercaseletters' });
    expect(lower.statusCode).toBe(201);
  });

  it('rejects the email as the password', async () => {
    const email = uniqueEmail();
    const res = await register({ email, password: email });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('PASSWORD_CONTAINS_EMAIL');
  });

  it.each([
    [{ password: GOOD_PASSWORD }, 'body.email'],
    [{ email: 'not-an-email', password: GOOD_PASSWORD }, 'body.email'],
    [{ email: 'a@example.com' }, 'body.password'],
    [{ email: 'a@example.com', password: GOOD_PASSWORD, roles: ['superuser'] }, 'body.roles.0'],
    [{ email: 'a@example.com', password: GOOD_PASSWORD, roles: [] }, 'body.roles'],
    [{ email: 42, password: GOOD_PASSWORD }, 'body.email'],
  ])('answers the bad body %j with 400 naming %s', async (payload, path) => {
    const res = await register(payload);
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
  });

  it('answers malformed JSON with 400 MALFORMED_JSON', async () => {
    const res = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/register',
      payload: '{"email": ',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('MALFORMED_JSON');
  });
});
