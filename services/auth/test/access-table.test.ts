/**
 * Who may call which auth route: every route × every kind of caller, with
 * tokens signed by the auth service's own key for users and clients that
 * exist in its database.
 */
import { randomUUID } from 'node:crypto';
import { type ClientRole, UNCHECKED_PRINCIPAL, type UserRole } from '@gpu/common';
import {
  type AccessRule,
  accessCallers,
  type CallerName,
  checkAccessTable,
  type TableCaller,
  testEnv,
} from '@gpu/common/testing';
import { createUser } from '@nats-io/nkeys';
import { SignJWT } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import { insertUser } from '../src/db/user-repository.ts';
import { createApiKey } from '../src/domain/api-keys.ts';
import { createClient } from '../src/domain/clients.ts';
import { addSshKey } from '../src/domain/ssh-keys/index.ts';
import { issueAccessToken, issueClientToken } from '../src/domain/token-pair.ts';
import { newEd25519Key } from './fixtures/ssh-keys.ts';
import { decodeJwt, GOOD_PASSWORD, registerAndLogin, testConfig, uniqueEmail, useAuth } from './helpers.ts';

// NATS users issued (the tests' NATS trust), so that a daemon's request is answered as on a platform that issues them.
const auth = useAuth(testConfig({ nats: { issuer_file: testEnv.natsTrust } }));
let callers: Record<CallerName, TableCaller>;

/** Users and clients made in the auth database, with tokens signed by the auth service's key. */
const authIssuer = {
  async user(roles: UserRole[], id?: string) {
    const row = await insertUser(auth.db, { email: uniqueEmail('table'), password_hash: 'x', roles });
    void id;
    const { token } = await issueAccessToken(auth.ctx, row);
    return { id: row.id, token, headers: { authorization: `Bearer ${token}` } };
  },
  async client(role: ClientRole, ownerId?: string) {
    const { client } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
      name: `table-${randomUUID()}`,
      role,
      ...(role === 'daemon' ? { owner_id: ownerId } : {}),
    });
    const { token } = await issueClientToken(auth.ctx, client);
    return { id: client.id, token, headers: { authorization: `Bearer ${token}` } };
  },
  async sign(claims: Record<string, unknown> = {}, opts: { forged?: boolean } = {}) {
    const now = Math.floor(Date.now() / 1000);
    const key = new TextEncoder().encode(
      opts.forged ? 'another-secret-of-at-least-thirty-two-chars' : auth.config.jwt.secret_key,
    );
    return new SignJWT({
      iss: auth.config.jwt.issuer,
      aud: auth.config.jwt.audience,
      sub: randomUUID(),
      iat: now,
      exp: now + 900,
      jti: randomUUID(),
      roles: ['renter'],
      ...claims,
    })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(key);
  },
};

beforeAll(async () => {
  callers = await accessCallers(authIssuer as never);
});

const API = '/api/v1/auth';
const clientsOfOwner = async () =>
  (
    await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
      name: `owned-${randomUUID()}`,
      role: 'daemon',
      owner_id: callers.owner.id,
    })
  ).client.id;
const keyOfOwner = async () =>
  (
    await createApiKey(
      auth.ctx,
      { subject: callers.owner.id, kind: 'user', roles: ['provider'], actsFor: callers.owner.id, tokenId: 'table' },
      { name: `owned-${randomUUID()}`, scopes: ['read'] },
    )
  ).key.id;
const newSshKey = () => newEd25519Key().line;
const sshKeyOfOwner = async () =>
  (
    await addSshKey(
      auth.ctx,
      { subject: callers.owner.id, kind: 'user', roles: ['provider'], actsFor: callers.owner.id, tokenId: 'table' },
      { publicKey: newSshKey() },
    )
  ).id;
const CLIENT_ADMINS = { owner: 200, admin: 200, other_user: 404, others: 403 } as const;

function table(): Record<string, AccessRule> {
  return {
    [`POST ${API}/register`]: {
      public: true,
      request: () => ({ payload: { email: uniqueEmail('reg'), password: GOOD_PASSWORD } }),
      expect: { others: 201 },
    },
    [`POST ${API}/login`]: {
      public: true,
      request: async () => {
        const { email } = await registerAndLogin(auth.app);
        return { payload: { email, password: GOOD_PASSWORD } };
      },
      expect: { others: 200 },
    },
    [`POST ${API}/refresh`]: {
      public: true,
      request: async () => ({ payload: { refresh_token: (await registerAndLogin(auth.app)).tokens.refresh_token } }),
      expect: { others: 200 },
    },
    [`POST ${API}/logout`]: {
      public: true,
      request: async () => ({ payload: { refresh_token: (await registerAndLogin(auth.app)).tokens.refresh_token } }),
      expect: { others: 204 },
    },
    [`GET ${API}/me`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, admin: 200, others: 403 },
    },
    [`PUT ${API}/users/:id/roles`]: {
      request: async () => ({
        url: `${API}/users/${(await registerAndLogin(auth.app)).user.id}/roles`,
        payload: { roles: ['renter', 'provider'] },
      }),
      expect: { admin: 200, others: 403 },
    },
    [`POST ${API}/clients`]: {
      request: () => ({ payload: { name: `new-${randomUUID()}`, role: 'daemon', owner_id: callers.owner.id } }),
      expect: { owner: 201, admin: 201, others: 403 },
    },
    [`GET ${API}/clients`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, admin: 200, others: 403 },
    },
    [`GET ${API}/clients/:id`]: {
      request: async () => ({ url: `${API}/clients/${await clientsOfOwner()}` }),
      expect: CLIENT_ADMINS,
    },
    [`POST ${API}/clients/:id/rotate`]: {
      request: async () => ({ url: `${API}/clients/${await clientsOfOwner()}/rotate` }),
      expect: CLIENT_ADMINS,
    },
    [`DELETE ${API}/clients/:id`]: {
      request: async () => ({ url: `${API}/clients/${await clientsOfOwner()}` }),
      expect: CLIENT_ADMINS,
    },
    // API keys: users' own, by their sign-in (machine clients have none); another user's key is not there for them.
    [`POST ${API}/keys`]: {
      request: () => ({ payload: { name: `k-${randomUUID()}`, scopes: ['read'] } }),
      expect: { owner: 201, other_user: 201, renter: 201, others: 403 },
    },
    [`GET ${API}/keys`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, others: 403 },
    },
    [`DELETE ${API}/keys/:id`]: {
      request: async () => ({ url: `${API}/keys/${await keyOfOwner()}` }),
      expect: { owner: 200, other_user: 404, renter: 404, others: 403 },
    },
    // SSH keys: users' own, added and removed by their sign-in; one user's keys read by platform services and admins.
    [`POST ${API}/ssh-keys`]: {
      request: () => ({ payload: { public_key: newSshKey() } }),
      expect: { owner: 201, other_user: 201, renter: 201, admin: 201, others: 403 },
    },
    [`GET ${API}/ssh-keys`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, admin: 200, others: 403 },
    },
    [`DELETE ${API}/ssh-keys/:id`]: {
      request: async () => ({ url: `${API}/ssh-keys/${await sshKeyOfOwner()}` }),
      expect: { owner: 204, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    [`GET ${API}/users/:userId/ssh-keys`]: {
      request: () => ({ url: `${API}/users/${callers.owner.id}/ssh-keys` }),
      expect: { service: 200, admin: 200, others: 403 },
    },
    // A provider daemon's NATS user: its machine client only.
    [`POST ${API}/nats-users`]: {
      request: () => ({ payload: { public_key: createUser().getPublicKey() } }),
      expect: { daemon: 201, other_daemon: 201, others: 403 },
    },
    // Whether credentials behind tokens verified elsewhere are live: platform services (billing's streams) and admins.
    [`POST ${API}/credentials/live`]: {
      request: () => ({ payload: { credentials: [{ user_id: callers.owner.id }] } }),
      expect: { service: 200, admin: 200, others: 403 },
    },
    // Sign-ins and the password: the user's own sign-in (a table caller's token names no sign-in of its own).
    [`GET ${API}/sign-ins`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, admin: 200, others: 403 },
    },
    [`DELETE ${API}/sign-ins/:id`]: {
      request: async () => {
        const signedIn = await registerAndLogin(auth.app);
        return { url: `${API}/sign-ins/${decodeJwt(signedIn.tokens.access_token).sid}` };
      },
      expect: { owner: 404, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    [`DELETE ${API}/sign-ins`]: {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, admin: 200, others: 403 },
    },
    [`POST ${API}/password`]: {
      // The table's users have no real password: a wrong one is 401 for them, the refusal of users allowed to try.
      request: () => ({ payload: { current_password: 'not it', new_password: 'a brand new passphrase' } }),
      expect: { owner: 401, other_user: 401, renter: 401, admin: 401, others: 403 },
    },
    [`GET ${API}/audit`]: {
      request: () => ({}),
      expect: { admin: 200, others: 403 },
    },
    [`GET ${API}/audit/verify`]: {
      request: () => ({}),
      expect: { admin: 200, others: 403 },
    },
    // Recovery: this service has no SMTP server, so what would mail says so (503) once the caller passed.
    [`POST ${API}/email/verification`]: {
      request: () => ({}),
      expect: { owner: 503, other_user: 503, renter: 503, admin: 503, others: 403 },
    },
    [`POST ${API}/email/verify`]: {
      public: true,
      // A sign-in is optional here, but one sent must be valid.
      request: () => ({ payload: { token: 'not a code' } }),
      expect: { forged: 401, expired: 401, others: 400 },
    },
    [`POST ${API}/password/forgot`]: {
      public: true,
      request: () => ({ payload: { email: uniqueEmail('forgot') } }),
      expect: { others: 503 },
    },
    [`POST ${API}/password/reset`]: {
      public: true,
      request: () => ({ payload: { token: 'not a code', new_password: 'a brand new passphrase' } }),
      expect: { others: 400 },
    },
    [`POST ${API}/token`]: {
      public: true,
      request: async () => {
        const { client, secret } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
          name: `tok-${randomUUID()}`,
          role: 'service',
        });
        return { payload: { grant_type: 'client_credentials', client_id: client.id, client_secret: secret } };
      },
      expect: { others: 200 },
    },
    'GET /.well-known/jwks.json': { public: true, request: () => ({}), expect: { others: 200 } },
    [`GET ${API}/.well-known/jwks.json`]: { public: true, request: () => ({}), expect: { others: 200 } },
  };
}

describe('access table of the auth service', () => {
  it('answers every route as the table says, for every kind of caller, and has a rule for every route', async () => {
    const report = await checkAccessTable(auth.app, callers, table());
    expect(report).toEqual({ unlisted: [], unknown: [], mismatches: [] });
  });
});
