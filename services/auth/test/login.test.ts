import { lockWaiters } from '@gpu/common/testing';
import { SignJWT } from 'jose';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  bearer,
  decodeJwt,
  GOOD_PASSWORD,
  registerAndLogin,
  SECRET,
  startAuth,
  testConfig,
  uniqueEmail,
  useAuth,
} from './helpers.ts';

const auth = useAuth();

const login = (payload: Record<string, unknown>, app = auth.app) =>
  app.inject({ method: 'POST', url: '/api/v1/auth/login', payload });
const me = (headers: Record<string, string> = {}) =>
  auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers });

function sign(claims: Record<string, unknown>, opts: { secret?: string; alg?: string } = {}) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: 'gpu-platform-auth',
    aud: 'gpu-platform',
    iat: now,
    exp: now + 60,
    jti: 'j-1',
    roles: ['renter'],
    ...claims,
  })
    .setProtectedHeader({ alg: opts.alg ?? 'HS256' })
    .sign(new TextEncoder().encode(opts.secret ?? SECRET));
}

describe('POST /api/v1/auth/login', () => {
  it('issues a bearer access token with the contract claims and an opaque refresh token', async () => {
    const { user, tokens } = await registerAndLogin(auth.app, { roles: ['provider'] });
    expect(tokens.token_type).toBe('bearer');
    expect(tokens.expires_in).toBe(15 * 60);
    expect(tokens.refresh_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const claims = decodeJwt(tokens.access_token);
    expect(claims).toMatchObject({ iss: 'gpu-platform-auth', aud: 'gpu-platform', sub: user.id, roles: ['provider'] });
    expect(typeof claims.jti).toBe('string');
    expect((claims.exp as number) - (claims.iat as number)).toBe(15 * 60);
    const header = JSON.parse(Buffer.from(tokens.access_token.split('.')[0]!, 'base64url').toString());
    expect(header.alg).toBe('HS256');
  });

  it('stores refresh tokens only as hashes', async () => {
    const { tokens } = await registerAndLogin(auth.app);
    const rows = await auth.db.selectFrom('refresh_tokens').select('token_hash').execute();
    expect(rows.some((r) => r.token_hash === tokens.refresh_token)).toBe(false);
    expect(rows.every((r) => /^[0-9a-f]{64}$/.test(r.token_hash))).toBe(true);
  });

  it('accepts the email in another letter case', async () => {
    const { email } = await registerAndLogin(auth.app);
    const res = await login({ email: email.toUpperCase(), password: GOOD_PASSWORD });
    expect(res.statusCode).toBe(200);
  });

  it('answers a wrong password and an unknown email alike, in comparable time', async () => {
    const { email } = await registerAndLogin(auth.app);
    const strip = (body: Record<string, unknown>) => ({ ...body, request_id: undefined });
    const time = async (payload: Record<string, unknown>) => {
      const start = process.hrtime.bigint();
      const res = await login(payload);
      return { res, ms: Number(process.hrtime.bigint() - start) / 1e6 };
    };
    const wrong: number[] = [];
    const unknown: number[] = [];
    let wrongBody: Record<string, unknown> = {};
    let unknownBody: Record<string, unknown> = {};
    // Nine rounds, so that one slow answer on a busy 2-core machine does not move the median.
    for (let i = 0; i < 9; i++) {
      const a = await time({ email, password: 'not the right passphrase' });
      const b = await time({ email: uniqueEmail('nobody'), password: 'not the right passphrase' });
      expect(a.res.statusCode).toBe(401);
      expect(b.res.statusCode).toBe(401);
      expect(a.res.headers['www-authenticate']).toBe('Bearer');
      expect(b.res.headers['www-authenticate']).toBe('Bearer');
      wrong.push(a.ms);
      unknown.push(b.ms);
      wrongBody = strip(a.res.json());
      unknownBody = strip(b.res.json());
    }
    expect(unknownBody).toEqual(wrongBody);
    expect(wrongBody.code).toBe('INVALID_CREDENTIALS');
    const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
    // Both paths verify one argon2id hash (~tens of ms); without the dummy hash an unknown email answers in ~1 ms,
    // some fifty times faster: the bounds leave a busy host's noise room and still tell the two apart.
    expect(median(unknown)).toBeGreaterThan(median(wrong) * 0.25);
    expect(median(unknown)).toBeLessThan(median(wrong) * 4);
  });

  it('rehashes a password on login when the argon2id parameters were raised', async () => {
    const { email, user } = await registerAndLogin(auth.app);
    const stronger = await startAuth(auth.db, testConfig({ password: { memory_kib: 24_576, time_cost: 3 } }));
    try {
      expect((await login({ email, password: GOOD_PASSWORD }, stronger.app)).statusCode).toBe(200);
      const row = await auth.db
        .selectFrom('users')
        .select('password_hash')
        .where('id', '=', user.id)
        .executeTakeFirstOrThrow();
      expect(row.password_hash).toMatch(/^\$argon2id\$v=19\$m=24576,p=1,t=3\$/);
      expect((await login({ email, password: GOOD_PASSWORD })).statusCode).toBe(200);

      // Two logins at once, each rehashing: the second finds the first's hash (another salt), checks the password
      // against it again, and signs in too. (Both held at the account until both wait, then let go together.)
      const other = await registerAndLogin(auth.app);
      let both: ReturnType<typeof login>[] = [];
      await auth.db.transaction().execute(async (trx) => {
        await sql`SELECT 1 FROM users WHERE id = ${other.user.id} FOR UPDATE`.execute(trx);
        both = [0, 1].map(() => login({ email: other.email, password: GOOD_PASSWORD }, stronger.app));
        await lockWaiters(auth.db, 2);
      });
      expect((await Promise.all(both)).map((r) => r.statusCode)).toEqual([200, 200]);
    } finally {
      await stronger.close();
    }
  });

  it('validates the body', async () => {
    const res = await login({ email: 'someone@example.com' });
    expect(res.statusCode).toBe(400);
    expect(res.json().errors[0].path).toBe('body.password');
  });
});

describe('GET /api/v1/auth/me and bearer tokens', () => {
  it("returns the caller's user for a valid access token", async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const res = await me(bearer(tokens.access_token));
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ id: user.id, email: user.email, roles: ['renter'] });
  });

  it('answers 401 with WWW-Authenticate without a token or with a malformed header', async () => {
    const none = await me();
    expect(none.statusCode).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expect(none.json().code).toBe('MISSING_TOKEN');
    const basic = await me({ authorization: 'Basic dXNlcjpwYXNz' });
    expect(basic.statusCode).toBe(401);
  });

  it('rejects an expired access token with TOKEN_EXPIRED', async () => {
    const { user } = await registerAndLogin(auth.app);
    const past = Math.floor(Date.now() / 1000) - 3600;
    const token = await sign({ sub: user.id, iat: past - 60, exp: past });
    const res = await me(bearer(token));
    expect(res.statusCode).toBe(401);
    expect(res.json().code).toBe('TOKEN_EXPIRED');
  });

  it('rejects alg none, a wrong audience or issuer, another key, and a tampered payload', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const claims = decodeJwt(tokens.access_token);
    const unsigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`;
    const [h, , s] = tokens.access_token.split('.');
    const tampered = `${h}.${b64({ ...claims, roles: ['admin'] })}.${s}`;
    const cases = [
      unsigned,
      tampered,
      await sign({ sub: user.id, aud: 'another-audience' }),
      await sign({ sub: user.id, iss: 'someone-else' }),
      await sign({ sub: user.id }, { secret: 'another-secret-that-is-long-enough-to-use!!' }),
      await sign({ sub: user.id, roles: 'admin' }),
    ];
    for (const token of cases) {
      const res = await me(bearer(token));
      expect(res.statusCode, token).toBe(401);
      expect(res.json().code).toBe('INVALID_TOKEN');
    }
    const valid = await sign({ sub: user.id });
    expect((await me(bearer(valid))).statusCode).toBe(200);
  });
});
