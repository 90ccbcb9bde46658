/**
 * A token issuer for tests: an Ed25519 key of its own, published as a JWKS
 * over real HTTP like the auth service's, and tokens signed with it carrying
 * the platform's claims. Services under test verify them exactly as in
 * production (a remote JWKS, cached, EdDSA), so no test bypasses access
 * control. Cross-service tests use the real auth service instead.
 *
 *   const issuer = await startTestIssuer();
 *   const config = { access: issuer.accessConfig };          // service config under test
 *   const renter = await issuer.user(['renter']);             // { id, token, headers }
 *   app.inject({ ..., headers: renter.headers });
 */
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { exportJWK, type JWK, SignJWT } from 'jose';
import type { ClientRole, Role, UserRole } from '../auth/roles.ts';

export interface Caller {
  /** The user's or client's ID (the token's `sub`). */
  id: string;
  token: string;
  /** `{ authorization: 'Bearer <token>' }`. */
  headers: { authorization: string };
}

export interface TestIssuer {
  issuer: string;
  audience: string;
  jwksUrl: string;
  /** The `access` section of a service's configuration that trusts this issuer. */
  accessConfig: { jwks_url: string; issuer: string; audience: string };
  /** A token with the platform's claims; `claims` override or add any claim (an expired `exp`, a wrong `aud`). */
  sign(claims?: Record<string, unknown>, opts?: { kid?: string; forged?: boolean }): Promise<string>;
  /** A user's token (a new user ID unless given). */
  user(roles: UserRole[], id?: string): Promise<Caller>;
  /** A machine client's token; a daemon names the provider owner it acts for. */
  client(role: ClientRole, ownerId?: string): Promise<Caller>;
  close(): Promise<void>;
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

export async function startTestIssuer(
  opts: { issuer?: string; audience?: string; expiresInSeconds?: number } = {},
): Promise<TestIssuer> {
  const issuer = opts.issuer ?? 'gpu-platform-auth';
  const audience = opts.audience ?? 'gpu-platform';
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  // A key of the same kind and `kid` that the JWKS does not hold: what a forger would sign with.
  const forger = generateKeyPairSync('ed25519').privateKey;
  const kid = `test-${randomUUID().slice(0, 8)}`;
  const jwk: JWK = { ...(await exportJWK(publicKey)), kid, alg: 'EdDSA', use: 'sig' };
  const body = JSON.stringify({ keys: [jwk] });
  const server: Server = createServer((req, res) => {
    if (req.url !== '/.well-known/jwks.json') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const jwksUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;

  const sign: TestIssuer['sign'] = async (claims = {}, signOpts = {}) => {
    const now = Math.floor(Date.now() / 1000);
    const payload = {
      iss: issuer,
      aud: audience,
      sub: randomUUID(),
      iat: now,
      exp: now + (opts.expiresInSeconds ?? 900),
      jti: randomUUID(),
      roles: ['renter'] as Role[],
      ...claims,
    };
    return new SignJWT(payload)
      .setProtectedHeader({ alg: 'EdDSA', kid: signOpts.kid ?? kid, typ: 'at+jwt' })
      .sign(signOpts.forged ? forger : privateKey);
  };
  return {
    issuer,
    audience,
    jwksUrl,
    accessConfig: { jwks_url: jwksUrl, issuer, audience },
    sign,
    async user(roles, id = randomUUID()) {
      // A user whose address is verified, as most are by the time they move money (verified-email.ts).
      const token = await sign({ sub: id, roles, email_verified: true });
      return { id, token, headers: bearer(token) };
    },
    async client(role, ownerId) {
      const id = randomUUID();
      const token = await sign({
        sub: id,
        client_id: id,
        roles: [role],
        ...(role === 'daemon' ? { owner_id: ownerId ?? randomUUID() } : {}),
      });
      return { id, token, headers: bearer(token) };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * Makes `app.inject` send `caller`'s token unless a request names `authorization` itself (undefined: no header):
 * for tests that are about something other than access, so they call with a real, verified token.
 */
export function injectAs<A extends { inject: (...args: never[]) => unknown }>(app: A, caller: Caller): A {
  const inject = (app.inject as (req: Record<string, unknown>) => unknown).bind(app);
  (app as Record<symbol, unknown>)[PLAIN_INJECT] = inject;
  (app as { inject: unknown }).inject = (req: Record<string, unknown>) => {
    const own = (req.headers ?? {}) as Record<string, string | undefined>;
    const headers = 'authorization' in own ? { ...own } : { ...caller.headers, ...own };
    if (headers.authorization === undefined) delete headers.authorization;
    return inject({ ...req, headers });
  };
  return app;
}

const PLAIN_INJECT = Symbol('plain inject');

/** The app's own `inject`, without the default caller `injectAs` adds: for tests where the caller is the point. */
export function uninjected(app: FastifyInstance): FastifyInstance['inject'] {
  return (
    ((app as unknown as Record<symbol, unknown>)[PLAIN_INJECT] as FastifyInstance['inject']) ?? app.inject.bind(app)
  );
}
