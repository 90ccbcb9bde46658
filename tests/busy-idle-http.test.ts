/**
 * Billing without NATS tells the real provider registry which sessions run on a machine, over HTTP with its own
 * machine client: the registry shows the machine busy while the session runs and idle after. The calls go through
 * billing's transactional outbox, so a call that fails (registry away) is made again by the next relay run.
 */
import { randomUUID } from 'node:crypto';
import { createLogger, OutboxRelay, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../services/auth/src/domain/clients.ts';
import { registrySessionPublisher } from '../services/billing/src/adapters/registry-sessions.ts';
import { end, H100_X1, start } from '../services/billing/test/support/sessions.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;
const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });

beforeAll(async () => {
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `billing-${randomUUID()}`,
    role: 'service',
  });
  billing = await setupBilling({
    config: {
      provider_registry: {
        url: platform.registryUrl,
        auth_url: platform.authUrl,
        client_id: client.id,
        client_secret: secret,
      },
    },
  });
});
afterAll(async () => {
  await billing?.close();
});

/** A relay of billing's outbox that reports sessions to the registry at `url` (the real one unless given). */
function relayTo(url = platform.registryUrl) {
  const publisher = registrySessionPublisher({ ...billing.config.provider_registry, url, timeout: '500ms' }, logger);
  return new OutboxRelay(billing.db, publisher!, { subject: 'unused', logger });
}

/** Calls the real registry as an admin's tooling would (a `service` machine client of the real auth service). */
async function registry(method: string, path: string, body?: unknown) {
  const token = await (await platform.machineClient('service')).get();
  const res = await fetch(`${platform.registryUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return (await res.json()) as { id: string; status: string };
}

const statusOf = async (id: string) => (await registry('GET', `/providers/${id}`)).status;

/** A machine at the registry, its provider wallet at billing, and a funded renter. */
async function rental() {
  const machine = await registry('POST', '/providers', providerBody({ owner_id: randomUUID() }));
  const provider = await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
  const renter = await billing.fundedWallet('50', 'user');
  const body = {
    user_id: renter.ownerId,
    wallet_id: renter.id,
    provider_id: machine.id,
    job_id: randomUUID(),
    ...H100_X1,
  };
  return { machine, provider, body };
}

describe('busy and idle without NATS', () => {
  it('shows the machine busy while its session runs and idle once it ended', async () => {
    const relay = relayTo();
    const { machine, body } = await rental();
    const started = await start(billing, body);
    expect(started.statusCode).toBe(201);
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('busy');
    expect((await end(billing, started.json().session.id)).statusCode).toBe(200);
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('idle');
  });

  it('makes a failed call again on the next relay run: nothing is lost while the registry is away', async () => {
    const { machine, body } = await rental();
    const started = await start(billing, body);
    expect(started.statusCode).toBe(201);
    // Nothing listens on port 9: the call fails, the event stays in the outbox.
    await relayTo('http://127.0.0.1:9').flush();
    expect(await statusOf(machine.id)).toBe('idle');
    const pending = await billing.db
      .selectFrom('outbox_events')
      .select('kind')
      .where('published_at', 'is', null)
      .execute();
    expect(pending.map((r) => r.kind)).toContain('session.started');
    await relayTo().flush();
    expect(await statusOf(machine.id)).toBe('busy');
  });
});
