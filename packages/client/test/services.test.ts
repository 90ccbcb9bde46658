/**
 * The client against the real services: a machine client's token from the auth service (client credentials, EdDSA,
 * verified by the registry through auth's JWKS), typed calls to the registry, and problems as `ApiError`s.
 */
import { randomUUID } from 'node:crypto';
import { UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertUser } from '../../../services/auth/src/db/user-repository.ts';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { testConfig, uniqueEmail, useAuth } from '../../../services/auth/test/helpers.ts';
import { type Harness, providerBody, startHarness } from '../../../services/provider-registry/test/helpers.ts';
import { ApiError, clientCredentials, registryClient, unwrap } from '../src/index.ts';

const auth = useAuth(testConfig({ jwt: { algorithm: 'EdDSA' } }));
let authUrl: string;
let registry: Harness;
let registryUrl: string;

beforeAll(async () => {
  authUrl = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  registry = await startHarness({
    nats: false,
    config: {
      access: {
        jwks_url: `${authUrl}/.well-known/jwks.json`,
        issuer: auth.config.jwt.issuer,
        audience: auth.config.jwt.audience,
      },
    },
  });
  registryUrl = await registry.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(() => registry?.close());

async function machineClient(role: 'service' | 'daemon', ownerId?: string) {
  const { client, secret } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `client-test-${randomUUID()}`,
    role,
    ...(ownerId ? { owner_id: ownerId } : {}),
  });
  return clientCredentials({ authUrl, clientId: client.id, clientSecret: secret });
}

describe('typed client against the services', () => {
  it('registers and reads a provider as a platform service, with a client-credentials token', async () => {
    const registryApi = registryClient({ baseUrl: registryUrl, token: await machineClient('service') });
    const body = providerBody({ owner_id: randomUUID() });
    const created = unwrap(await registryApi.POST('/providers', { body: body as never }));
    const read = unwrap(
      await registryApi.GET('/providers/{providerID}', { params: { path: { providerID: created.id } } }),
    );
    expect(read).toMatchObject({ id: created.id, name: body.name, owner_id: body.owner_id });
  });

  it("answers a daemon's request for someone else's machine as an ApiError with the service's code", async () => {
    const { id: owner } = await insertUser(auth.db, {
      email: uniqueEmail('provider'),
      password_hash: 'x',
      roles: ['provider'],
    });
    const daemonApi = registryClient({ baseUrl: registryUrl, token: await machineClient('daemon', owner) });
    const mine = unwrap(await daemonApi.POST('/providers', { body: providerBody({ owner_id: owner }) as never }));
    expect(mine.owner_id).toBe(owner);
    const refused = await daemonApi
      .POST('/providers', { body: providerBody({ owner_id: randomUUID() }) as never })
      .then(unwrap)
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 403, code: 'NOT_PROVIDER_OWNER' });
  });
});
