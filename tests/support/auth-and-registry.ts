/**
 * Two real services working together, for tests of the programs that call them (the typed client, the provider
 * daemon): the auth service signing EdDSA tokens and listening on a port, and a provider registry that verifies
 * tokens through auth's JWKS. Machine clients and provider users are made in auth's own database.
 *
 *   const platform = useAuthAndRegistry();
 *   const token = await platform.machineClient('daemon', (await platform.providerUser()).id);
 */
import { randomUUID } from 'node:crypto';
import { type ClientRole, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, expect } from 'vitest';
import { clientCredentials, type TokenSource } from '../../packages/client/src/index.ts';
import { insertUser } from '../../services/auth/src/db/user-repository.ts';
import { createClient } from '../../services/auth/src/domain/clients.ts';
import { GOOD_PASSWORD, type TestAuth, testConfig, uniqueEmail, useAuth } from '../../services/auth/test/helpers.ts';
import { type Harness, startHarness } from '../../services/provider-registry/test/helpers.ts';

export interface AuthAndRegistry {
  auth: TestAuth;
  authUrl: string;
  registry: Harness;
  registryUrl: string;
  /** A machine client made at the auth service, as a token source (client credentials). */
  machineClient(role: ClientRole, ownerId?: string): Promise<TokenSource>;
  /** A user with the provider role. */
  providerUser(): Promise<{ id: string }>;
  /**
   * A user registered and signed in at auth with a verified address (as tests of money moving out need: the address
   * is marked in auth's database; services/auth/test/recovery.test.ts tests verifying it by mail).
   */
  verifiedUser(roles: string[]): Promise<{ user: { id: string }; tokens: { access_token: string } }>;
}

/**
 * Starts both in `beforeAll` (closed in `afterAll`); the returned object is filled in when `beforeAll` runs.
 * `authSettings`: sections of the auth service's configuration to set (`{ api_keys: { token_ttl: '2s' } }`).
 */
export function useAuthAndRegistry(
  authSettings: Record<string, unknown> = {},
  /**
   * The registry's: over NATS (`nats`), consuming billing's session events (`consumeSessionEvents`), taking heartbeats
   * from NATS (`takeHeartbeats`) on `heartbeatSubject`, with subjects that name their sender (`subjectIdentity`).
   */
  registryOptions: {
    nats?: boolean;
    consumeSessionEvents?: boolean;
    takeHeartbeats?: boolean;
    heartbeatSubject?: string;
    subjectIdentity?: boolean;
    /** Settings of the registry's own (`offline_after`, ...), and whether its offline sweep runs. */
    config?: Record<string, unknown>;
    sweeper?: boolean;
  } = {},
): AuthAndRegistry {
  const auth = useAuth(testConfig({ jwt: { algorithm: 'EdDSA' }, ...authSettings }));
  const platform: AuthAndRegistry = {
    auth,
    // Filled in by beforeAll.
    authUrl: '',
    registryUrl: '',
    registry: undefined as unknown as Harness,
    async machineClient(role: ClientRole, ownerId?: string) {
      const { client, secret } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
        name: `test-${role}-${randomUUID()}`,
        role,
        ...(ownerId ? { owner_id: ownerId } : {}),
      });
      return clientCredentials({ authUrl: platform.authUrl, clientId: client.id, clientSecret: secret });
    },
    async providerUser() {
      return insertUser(auth.db, { email: uniqueEmail('provider'), password_hash: 'x', roles: ['provider'] });
    },
    async verifiedUser(roles: string[]) {
      const email = uniqueEmail('verified');
      const registered = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/register',
        payload: { email, password: GOOD_PASSWORD, roles },
      });
      const user = registered.json().user as { id: string };
      await auth.db.updateTable('users').set({ email_verified_at: new Date() }).where('id', '=', user.id).execute();
      const login = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email, password: GOOD_PASSWORD },
      });
      return { user, tokens: login.json() as { access_token: string } };
    },
  };
  beforeAll(async () => {
    platform.authUrl = await auth.app.listen({ host: '127.0.0.1', port: 0 });
    platform.registry = await startHarness({
      nats: registryOptions.nats ?? false,
      consumeSessionEvents: registryOptions.consumeSessionEvents,
      takeHeartbeats: registryOptions.takeHeartbeats,
      heartbeatSubject: registryOptions.heartbeatSubject,
      subjectIdentity: registryOptions.subjectIdentity,
      ...(registryOptions.sweeper ? { sweeper: true } : {}),
      config: {
        ...registryOptions.config,
        access: {
          jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
          issuer: auth.config.jwt.issuer,
          audience: auth.config.jwt.audience,
        },
      },
    });
    platform.registryUrl = await platform.registry.app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(() => platform.registry?.close());
  return platform;
}

/**
 * Gives the registry the platform's prices, as billing announces them: the market lists machines once it has them.
 * `card`: billing's own card (its `pricing`), so that the market's prices are those billing charges; without one, a
 * card of the test's (a base rate of 0.25 for every model).
 */
export async function priceTheMarket(
  platform: AuthAndRegistry,
  card: { baseRates: Record<string, string>; vramRatePerGbHour: string; powerRatePerWattHour: string } = {
    baseRates: { default: '0.25' },
    vramRatePerGbHour: '0.02',
    powerRatePerWattHour: '0.001',
  },
): Promise<void> {
  const service = await platform.machineClient('service');
  const prices = await platform.registry.app.inject({
    method: 'POST',
    url: '/messages',
    headers: { authorization: `Bearer ${await service.get()}` },
    payload: {
      event_id: randomUUID(),
      kind: 'pricing.platform_rates',
      occurred_at: new Date().toISOString(),
      card: {
        occurred_at: new Date().toISOString(),
        base_rates: card.baseRates,
        vram_rate_per_gb_hour: card.vramRatePerGbHour,
        power_rate_per_watt_hour: card.powerRatePerWattHour,
      },
    },
  });
  expect(prices.statusCode, prices.body).toBe(200);
}
