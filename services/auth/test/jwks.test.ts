import { generateKeyPairSync } from 'node:crypto';
import { type AppError, createTokenVerifier, statusOf } from '@gpu/common';
import { importPKCS8, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, decodeJwt, freshDatabase, registerAndLogin, startAuth, type TestAuth, testConfig } from './helpers.ts';

let database: Awaited<ReturnType<typeof freshDatabase>>;
const started: TestAuth[] = [];

const pem = (alg: 'EdDSA' | 'ES256' | 'RS256') => {
  const { privateKey } =
    alg === 'EdDSA'
      ? generateKeyPairSync('ed25519')
      : alg === 'ES256'
        ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
        : generateKeyPairSync('rsa', { modulusLength: 2048 });
  return privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
};

/** An auth app over the shared database, listening on a loopback port; returns its base URL. */
async function serve(jwt: Record<string, unknown>): Promise<{ auth: TestAuth; url: string }> {
  const auth = await startAuth(database.db, testConfig({ jwt }));
  started.push(auth);
  const url = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  return { auth, url };
}

/** A verifier that holds no secret: it knows only the JWKS URL, as another service would. */
const remoteVerifier = (url: string) =>
  createTokenVerifier({
    issuer: 'gpu-platform-auth',
    audience: 'gpu-platform',
    jwksUrl: `${url}/.well-known/jwks.json`,
    cacheSize: 0,
  });

beforeAll(async () => {
  database = await freshDatabase();
});

afterAll(async () => {
  for (const a of started) await a.close();
  await database?.close();
});

describe('JWKS and asymmetric signing', () => {
  it.each(['EdDSA', 'ES256', 'RS256'] as const)(
    'issues %s tokens that an independent verifier checks against the published JWKS',
    async (alg) => {
      const { auth, url } = await serve({ algorithm: alg, private_key: pem(alg), key_id: `key-${alg}` });
      const { user, tokens } = await registerAndLogin(auth.app);
      const header = JSON.parse(Buffer.from(tokens.access_token.split('.')[0]!, 'base64url').toString());
      expect(header).toMatchObject({ alg, kid: `key-${alg}` });
      const res = await fetch(`${url}/.well-known/jwks.json`);
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toContain('max-age');
      const jwks = (await res.json()) as { keys: Array<Record<string, unknown>> };
      const published = jwks.keys.find((k) => k.kid === `key-${alg}`);
      expect(published).toMatchObject({ alg, use: 'sig' });
      expect(published).not.toHaveProperty('d');
      const claims = await remoteVerifier(url).verify(tokens.access_token);
      expect(claims).toMatchObject({ sub: user.id, roles: ['renter'] });
      const viaGateway = await fetch(`${url}/api/v1/auth/.well-known/jwks.json`);
      expect(((await viaGateway.json()) as { keys: unknown[] }).keys.length).toBe(jwks.keys.length);
    },
  );

  it('keeps a rotated-out key published so its tokens stay valid, then drops it after retention', async () => {
    const first = await serve({ algorithm: 'EdDSA', private_key: pem('EdDSA') });
    const { tokens: oldTokens } = await registerAndLogin(first.auth.app);
    const oldKid = JSON.parse(Buffer.from(oldTokens.access_token.split('.')[0]!, 'base64url').toString()).kid;
    expect(oldKid).toMatch(/^[A-Za-z0-9_-]{43}$/); // RFC 7638 thumbprint when no key_id is configured

    const second = await serve({ algorithm: 'EdDSA', private_key: pem('EdDSA') });
    const { tokens: newTokens } = await registerAndLogin(second.auth.app);
    const newKid = JSON.parse(Buffer.from(newTokens.access_token.split('.')[0]!, 'base64url').toString()).kid;
    expect(newKid).not.toBe(oldKid);
    const jwks = (await (await fetch(`${second.url}/.well-known/jwks.json`)).json()) as {
      keys: Array<{ kid: string }>;
    };
    expect(jwks.keys.map((k) => k.kid)).toEqual(expect.arrayContaining([oldKid, newKid]));
    const verifier = remoteVerifier(second.url);
    await expect(verifier.verify(oldTokens.access_token)).resolves.toMatchObject({ roles: ['renter'] });
    await expect(verifier.verify(newTokens.access_token)).resolves.toMatchObject({ roles: ['renter'] });
    // The new instance also accepts the old token on its own protected routes.
    const me = await second.auth.app.inject({
      method: 'GET',
      url: '/api/v1/auth/me',
      headers: bearer(oldTokens.access_token),
    });
    expect(me.statusCode).toBe(200);

    // Once the old key retired longer ago than the access-token lifetime plus margin, it is no longer published.
    await database.db
      .updateTable('signing_keys')
      .set({ retired_at: new Date(Date.now() - 24 * 3600_000) })
      .where('kid', '=', oldKid)
      .execute();
    const third = await serve({ algorithm: 'EdDSA', private_key: pem('EdDSA') });
    const later = (await (await fetch(`${third.url}/.well-known/jwks.json`)).json()) as {
      keys: Array<{ kid: string }>;
    };
    expect(later.keys.map((k) => k.kid)).not.toContain(oldKid);
    expect(later.keys.map((k) => k.kid)).toContain(newKid);
    const rejected = await remoteVerifier(third.url)
      .verify(oldTokens.access_token)
      .catch((e: { code: string }) => e.code);
    expect(rejected).toBe('INVALID_TOKEN');
  });

  it('rejects a token signed by another key under a published kid', async () => {
    const { auth, url } = await serve({ algorithm: 'EdDSA', private_key: pem('EdDSA'), key_id: 'shared-kid' });
    const { tokens } = await registerAndLogin(auth.app);
    const forged = await new SignJWT(decodeJwt(tokens.access_token))
      .setProtectedHeader({ alg: 'EdDSA', kid: 'shared-kid' })
      .sign(await importPKCS8(pem('EdDSA'), 'EdDSA'));
    const code = await remoteVerifier(url)
      .verify(forged)
      .catch((e: { code: string }) => e.code);
    expect(code).toBe('INVALID_TOKEN');
    const me = await auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer(forged) });
    expect(me.statusCode).toBe(401);
  });

  it('answers 503 from a verifier whose JWKS cannot be fetched', async () => {
    const { auth } = await serve({ algorithm: 'EdDSA', private_key: pem('EdDSA') });
    const { tokens } = await registerAndLogin(auth.app);
    const err = await remoteVerifier('http://127.0.0.1:9')
      .verify(tokens.access_token)
      .catch((e: AppError) => statusOf(e));
    expect(err).toBe(503);
  });

  it('refuses a private key that does not fit the algorithm', async () => {
    await expect(
      startAuth(database.db, testConfig({ jwt: { algorithm: 'ES256', private_key: pem('EdDSA') } })),
    ).rejects.toThrow(/does not fit ES256/);
  });

  it('publishes an empty key set with HS256', async () => {
    const { url } = await serve({ algorithm: 'HS256' });
    expect(await (await fetch(`${url}/.well-known/jwks.json`)).json()).toEqual({ keys: [] });
  });
});
