/**
 * The client against the real services: a machine client's token from the auth service (client credentials, EdDSA,
 * verified by the registry through auth's JWKS), typed calls to the registry, and problems as `ApiError`s, a token
 * endpoint's refusal among them.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { providerBody } from '../../../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { ApiError, clientCredentials, registryClient, TokenRequestError, unwrap } from '../src/index.ts';

const platform = useAuthAndRegistry();

describe('typed client against the services', () => {
  it('registers and reads a provider as a platform service, with a client-credentials token', async () => {
    const registryApi = registryClient({
      baseUrl: platform.registryUrl,
      token: await platform.machineClient('service'),
    });
    const body = providerBody({ owner_id: randomUUID() });
    const created = unwrap(await registryApi.POST('/providers', { body: body as never }));
    const read = unwrap(
      await registryApi.GET('/providers/{providerID}', { params: { path: { providerID: created.id } } }),
    );
    expect(read).toMatchObject({ id: created.id, name: body.name, owner_id: body.owner_id });
  });

  it("answers a daemon's request for someone else's machine as an ApiError with the service's code", async () => {
    const { id: owner } = await platform.providerUser();
    const daemonApi = registryClient({
      baseUrl: platform.registryUrl,
      token: await platform.machineClient('daemon', owner),
    });
    const mine = unwrap(await daemonApi.POST('/providers', { body: providerBody({ owner_id: owner }) as never }));
    expect(mine.owner_id).toBe(owner);
    const refused = await daemonApi
      .POST('/providers', { body: providerBody({ owner_id: randomUUID() }) as never })
      .then(unwrap)
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 403, code: 'NOT_PROVIDER_OWNER' });
  });

  it("answers a token endpoint's refusal as an ApiError with auth's code, its message naming the endpoint", async () => {
    const tokens = clientCredentials({ authUrl: platform.authUrl, clientId: randomUUID(), clientSecret: 'wrong' });
    const refused = await tokens.get().catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(TokenRequestError);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 401, code: 'INVALID_CLIENT' });
    expect((refused as Error).message).toMatch(/\/api\/v1\/auth\/token answered 401 INVALID_CLIENT: /);
  });
});
