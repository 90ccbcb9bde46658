/**
 * A reservation lapses at its expiry, and the market shows its GPUs free within one message of that moment: billing's
 * background sweep is woken for the expiry (no registry sweep exists any more), states the machine's held GPUs, and
 * the registry applies the statement from NATS JetStream. Real clocks, real NATS, both services in process.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, createLogger, type NatsPublisher, NoopPublisher, OutboxRelay } from '@gpu/common';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Background, startBackground } from '../services/billing/src/background.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { gpu, type Harness, register, startHarness } from '../services/provider-registry/test/helpers.ts';
import { registryInProcess } from './support/registry-in-process.ts';

const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
let registry: Harness;
let billing: BillingHarness;
let nats: NatsPublisher;
let relay: OutboxRelay;
let background: Background;
const stream = `TEST_BILLING_${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  registry = await startHarness({ consumeSessionEvents: true });
  const { messaging } = registry.config;
  billing = await setupBilling({
    config: { messaging: { stream, subjects: { events: messaging.subjects.billing_events } } },
    providers: registryInProcess(() => registry),
  });
  nats = (await connectPublisher({
    url: messaging.nats_url,
    credentials: messaging.nats_credentials,
    stream: { name: stream, subjects: [`${messaging.subjects.billing_events}.>`] },
  })) as NatsPublisher;
  relay = new OutboxRelay(billing.db, nats, { subject: messaging.subjects.billing_events, logger });
  // Publishes within 50 ms of a commit (the service's relay is also told of each commit).
  relay.start(50);
  // Billing's background work, its expiry sweep among it (its own relay publishes nothing: NATS is not configured).
  background = await startBackground(billing.ctx, billing.config, new NoopPublisher(), undefined, null);
});
afterAll(async () => {
  await background?.stop();
  await relay?.stop();
  if (nats) await (await jetstreamManager(nats.connection)).streams.delete(stream).catch(() => {});
  await nats?.close();
  await billing?.close();
  await registry?.close();
  await registry?.testDb.drop();
});

describe('a reservation that lapses', () => {
  it('frees its GPUs on the market within a message of its expiry, not before, with no sweep at the registry', async () => {
    const machine = await register(registry.app, { owner_id: randomUUID(), gpus: [gpu(), gpu()] });
    const reserved = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/billing/reservations',
      payload: { user_id: randomUUID(), provider_id: machine.id, gpu_model: 'A100', gpu_count: 2, ttl_seconds: 20 },
    });
    expect(reserved.statusCode, reserved.body).toBe(201);
    const expiresAt = Date.parse(reserved.json().expires_at);
    const holds = () => registry.app.holds.of(machine.id);
    const status = async () => (await registry.app.inject({ url: `/providers/${machine.id}` })).json().status;

    // Held at the registry while it lasts (long enough for a busy machine to carry the hold there first): busy.
    const deadline = Date.now() + 15_000;
    while ((await holds()).gpuIndices.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(await holds()).toEqual({ version: 1, gpuIndices: [0, 1] });
    expect(await status()).toBe('busy');

    // Freed once it lapsed: watch for the moment.
    let freedAt = 0;
    while (Date.now() < expiresAt + 15_000) {
      if ((await holds()).gpuIndices.length === 0) {
        freedAt = Date.now();
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(freedAt, 'the GPUs were never freed').toBeGreaterThan(0);
    expect(freedAt).toBeGreaterThanOrEqual(expiresAt);
    expect(await holds()).toEqual({ version: 2, gpuIndices: [] });
    expect(await status()).toBe('idle');
    // A busy machine may take longer; here it is a timer, a transaction and a message after the expiry.
    console.info(`GPUs free at the registry ${freedAt - expiresAt} ms after the reservation's expiry`);
  });
});
