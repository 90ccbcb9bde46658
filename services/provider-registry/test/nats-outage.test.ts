/**
 * A NATS outage, against a real nats-server of the test's own that it stops and starts again: `/health` answers 503
 * naming NATS while it is away (as billing's does), `nats_connected` says 0, and the status events recorded meanwhile
 * wait in the outbox (`registry_outbox_backlog`, `registry_outbox_oldest_seconds`) until NATS is back and the relay
 * has published them. `/health/ready` (the readiness probe's and Consul's check) stays 200 all along: taking every
 * instance out for an outage the registry rides out would stop the machines' HTTP heartbeats.
 */
import { freePort } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DedicatedNats } from './dedicated-nats.ts';
import { type Harness, register, startHarness } from './helpers.ts';

let nats: DedicatedNats;
let h: Harness;

beforeAll(async () => {
  nats = new DedicatedNats(await freePort());
  await nats.start();
  h = await startHarness({ natsUrl: nats.url });
});
afterAll(async () => {
  await h?.close();
  await h?.testDb.drop();
  await nats?.destroy();
});

const health = async (url = '/health') => {
  const res = await h.app.inject({ url });
  return { status: res.statusCode, body: res.json() };
};
const metric = async (name: string) => {
  const text = (await h.app.inject({ url: '/metrics' })).body;
  const value = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1];
  return value === undefined ? undefined : Number(value);
};

/** Polls `read` until `done` holds of its value (a generous deadline: the machine may be busy). */
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, what: string, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what}: still ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('NATS outage', () => {
  it('says 503 while NATS is away yet stays ready, keeps the events in the outbox, and publishes them once it is back', async () => {
    expect(await health()).toMatchObject({ status: 200, body: { status: 'UP', checks: { nats: { status: 'UP' } } } });
    expect(await metric('nats_connected')).toBe(1);
    expect(await metric('registry_outbox_backlog')).toBe(0);
    expect(await metric('registry_outbox_oldest_seconds')).toBe(0);

    await nats.stop();
    const down = await until(health, (r) => r.status === 503, '/health while NATS is stopped');
    expect(down.body).toMatchObject({
      status: 'DOWN',
      checks: { database: { status: 'UP' }, nats: { status: 'DOWN', error: expect.stringMatching(/lost/) } },
    });
    expect(await metric('nats_connected')).toBe(0);
    // Still ready: it serves every request, and its instances stay in the load balancer and in discovery.
    expect(await health('/health/ready')).toMatchObject({
      status: 200,
      body: { status: 'UP', checks: { database: { status: 'UP' } } },
    });
    expect((await health('/health/ready')).body.checks).not.toHaveProperty('nats');

    // The registry still takes registrations; their events wait, and their age shows.
    await register(h.app);
    await register(h.app);
    expect(await metric('registry_outbox_backlog')).toBe(2);
    await until(
      () => metric('registry_outbox_oldest_seconds'),
      (v) => (v ?? 0) >= 1,
      'the oldest event ages',
    );

    await nats.start();
    await until(health, (r) => r.status === 200, '/health once NATS is back');
    expect(await metric('nats_connected')).toBe(1);
    await until(
      () => metric('registry_outbox_backlog'),
      (v) => v === 0,
      'the backlog drains',
    );
    expect(await metric('registry_outbox_oldest_seconds')).toBe(0);
  });
});
