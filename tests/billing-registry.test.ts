/**
 * Billing asks the real provider registry who owns a machine (with its own machine client's token from the real
 * auth service), for the provider accounts: only the machine's owner opens its provider wallet and sets its rates;
 * a machine the registry does not know is 404; a registry that cannot be reached is a 503, not a hang.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../services/auth/src/domain/clients.ts';
import { registerAndLogin } from '../services/auth/test/helpers.ts';
import { base58Encode } from '../services/billing/src/adapters/base58.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;
let deadRegistry: BillingHarness;

/** Billing trusting the real auth's keys and asking the registry at `registryUrl` with a service client of auth. */
async function billingWith(registryUrl: string, timeout = '3s') {
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `billing-${randomUUID()}`,
    role: 'service',
  });
  return setupBilling({
    config: {
      access: {
        jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
        issuer: platform.auth.config.jwt.issuer,
        audience: platform.auth.config.jwt.audience,
      },
      provider_registry: {
        url: registryUrl,
        auth_url: platform.authUrl,
        client_id: client.id,
        client_secret: secret,
        timeout,
      },
    },
  });
}

beforeAll(async () => {
  billing = await billingWith(platform.registryUrl);
  // Nothing listens on port 9 (discard) here: every call fails at once.
  deadRegistry = await billingWith('http://127.0.0.1:9', '500ms');
});
afterAll(async () => {
  await billing?.close();
  await deadRegistry?.close();
});

/** A user of the real auth service with the provider role, and their bearer header. */
async function providerUser() {
  const { user, tokens } = await registerAndLogin(platform.auth.app, { roles: ['provider'] });
  return { id: user.id, headers: { authorization: `Bearer ${tokens.access_token}` } };
}

/** A machine registered at the real registry by its owner. */
async function machineOf(owner: { id: string; headers: Record<string, string> }): Promise<string> {
  const res = await fetch(`${platform.registryUrl}/providers`, {
    method: 'POST',
    headers: { ...owner.headers, 'content-type': 'application/json' },
    body: JSON.stringify(providerBody({ owner_id: owner.id })),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

const call = (
  h: BillingHarness,
  headers: Record<string, string>,
  method: 'POST' | 'PUT' | 'GET',
  url: string,
  payload?: unknown,
) => h.app.inject({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });

const providerWallet = (providerId: string) => ({
  owner_type: 'provider',
  owner_id: providerId,
  solana_address: base58Encode(randomBytes(32)),
});

describe('billing and the provider registry', () => {
  it("opens a provider wallet for the machine's owner only, held by that owner", async () => {
    const owner = await providerUser();
    const other = await providerUser();
    const machine = await machineOf(owner);

    const stranger = await call(billing, other.headers, 'POST', '/wallet', providerWallet(machine));
    expect(stranger.statusCode).toBe(403);
    expect(stranger.json().code).toBe('NOT_PROVIDER_OWNER');

    const opened = await call(billing, owner.headers, 'POST', '/wallet', providerWallet(machine));
    expect(opened.statusCode).toBe(201);
    expect(opened.json()).toMatchObject({ owner_type: 'provider', owner_id: machine, holder_id: owner.id });

    // The owner reads the earnings and sets the rates; the other provider does neither.
    expect((await call(billing, owner.headers, 'GET', `/provider/${machine}/earnings`)).statusCode).toBe(200);
    expect((await call(billing, other.headers, 'GET', `/provider/${machine}/earnings`)).statusCode).toBe(403);
    const rates = { base_rates: { 'NVIDIA H100 80GB HBM3': '3.50' } };
    expect((await call(billing, other.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(403);
    expect((await call(billing, owner.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(200);
  });

  it('sets rates before any wallet exists by asking the registry, and refuses machines it does not know', async () => {
    const owner = await providerUser();
    const machine = await machineOf(owner);
    const rates = { base_rates: { default: '1.25' } };
    expect((await call(billing, owner.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(200);

    const unknown = randomUUID();
    const res = await call(billing, owner.headers, 'POST', '/wallet', providerWallet(unknown));
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('PROVIDER_NOT_FOUND');
    const put = await call(billing, owner.headers, 'PUT', `/provider/${unknown}/rates`, rates);
    expect(put.statusCode).toBe(404);
  });

  it('answers 503 PROVIDER_REGISTRY_UNAVAILABLE when the registry cannot be reached, and writes nothing', async () => {
    const owner = await providerUser();
    const machine = randomUUID();
    const started = Date.now();
    const res = await call(deadRegistry, owner.headers, 'POST', '/wallet', providerWallet(machine));
    expect(res.statusCode).toBe(503);
    expect(res.json().code).toBe('PROVIDER_REGISTRY_UNAVAILABLE');
    expect(res.headers['retry-after']).toBe('5');
    expect(Date.now() - started).toBeLessThan(10_000);
    const rows = await deadRegistry.db.selectFrom('wallets').select('id').where('owner_id', '=', machine).execute();
    expect(rows).toEqual([]);
  });
});
