/**
 * A daemon acts for its own machine only, at billing too: a renter rents a machine its daemon registered (bound to
 * that daemon client at the real registry), and a second daemon client of the same owner (another of the owner's
 * machines, or credentials stolen from it) reports nothing for the rental: not usage over HTTP or NATS, not workload
 * states, no file grants. The owner re-binds the machine to the second client (a reinstall): billing follows the
 * registry's event, and from then on the second daemon reports the running session and the first no longer does.
 * Real auth (EdDSA tokens through client credentials), registry, billing, NATS JetStream and PostgreSQL.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { TokenSource } from '@gpu/client';
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientCredentials } from '../packages/client/src/index.ts';
import { createClient } from '../services/auth/src/domain/clients.ts';
import { startRegistryEventsConsumer } from '../services/billing/src/adapters/registry-events-consumer.ts';
import { startUsageConsumer } from '../services/billing/src/adapters/usage-consumer.ts';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import { checkRunningProviders } from '../services/billing/src/domain/sessions/index.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { gpu, providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry({}, { nats: true });
const logger = createLogger({ service: 'daemon-binding-test', instanceId: 't', level: 'silent' });
const suffix = randomUUID().slice(0, 8);
const usagePrefix = `test.${suffix}.billing.usage`;
const usageStream = `USAGE_BINDING_${suffix}`;
let billing: BillingHarness;
let publisher: NatsPublisher;
let stops: (() => Promise<void>)[] = [];
let usageRejections: () => Promise<Record<string, number>>;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  publisher = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'daemon-binding-test',
    stream: { name: usageStream, subjects: [`${usagePrefix}.>`] },
  })) as NatsPublisher;
  const usage = await startUsageConsumer({
    connection: publisher.connection,
    ctx: billing.ctx,
    verifier: billing.app.tokenVerifier,
    prefix: usagePrefix,
    logger,
    stream: usageStream,
    durable: 'billing-usage',
  });
  usageRejections = async () =>
    Object.fromEntries((await usage.metrics[0]!.get()).values.map((v) => [String(v.labels.reason), v.value]));
  // The registry's events (its own subject here), as billing reads them in the platform.
  const events = startRegistryEventsConsumer({
    connection: publisher.connection,
    ctx: billing.ctx,
    subject: platform.registry.subject,
    durable: `billing-provider-status-${suffix}`,
    logger,
  });
  stops = [() => usage.stop(), () => events.stop()];
});
afterAll(async () => {
  for (const stop of stops) await stop();
  await publisher?.close();
  await billing?.close();
});

/** A daemon client of `ownerId` made at the auth service: its ID and its tokens. */
async function daemonClient(ownerId: string): Promise<{ id: string; token: TokenSource }> {
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `rig-${randomUUID().slice(0, 8)}`,
    role: 'daemon',
    owner_id: ownerId,
  });
  return {
    id: client.id,
    token: clientCredentials({ authUrl: platform.authUrl, clientId: client.id, clientSecret: secret }),
  };
}

const bearer = async (t: TokenSource) => ({ authorization: `Bearer ${await t.get()}` });

const inject = (
  headers: Record<string, string>,
  method: 'GET' | 'POST',
  url: string,
  payload?: object,
  on: BillingHarness = billing,
) => on.app.inject({ method, url: `/api/v1${url}`, headers, ...(payload === undefined ? {} : { payload }) });

/** A renter of the real auth service, with a funded wallet, renting `machine` with a workload (at `on`). */
async function rentWithWorkload(machine: string, on: BillingHarness = billing): Promise<string> {
  const call = (headers: Record<string, string>, url: string, payload: object) =>
    inject(headers, 'POST', url, payload, on);
  const { user, tokens } = await platform.verifiedUser(['renter']);
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await call(headers, '/wallet', {
    owner_type: 'user',
    owner_id: user.id,
    solana_address: base58Encode(randomBytes(32)),
  });
  await on.credit(wallet.json().id, '100');
  const started = await call(headers, '/billing/start-session', {
    user_id: user.id,
    wallet_id: wallet.json().id,
    provider_id: machine,
    job_id: randomUUID(),
    gpu_model: 'H100',
    gpu_count: 1,
    requested_vram_mb: 0,
    estimated_power_w: 0,
    accepted_hourly_rate: '10',
    workload: { command: ['python3', 'train.py'], max_runtime_seconds: 600 },
  });
  expect(started.statusCode, started.body).toBe(201);
  return started.json().session.id as string;
}

const usageReport = (sessionId: string, messageId: string) => ({
  session_id: sessionId,
  timestamp: new Date().toISOString(),
  gpu_utilization: 50,
  power_draw_w: 300,
  message_id: messageId,
});

const records = async (sessionId: string) =>
  (
    await billing.db
      .selectFrom('usage_records')
      .select('message_id')
      .where('session_id', '=', sessionId)
      .orderBy('message_id')
      .execute()
  ).map((r) => r.message_id);

async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What each way a daemon reports for the session answers `token`: status and code. */
async function reportsAs(token: TokenSource, sessionId: string, tag: string) {
  const headers = await bearer(token);
  const code = (r: { statusCode: number; json: () => { code?: string } }) =>
    r.statusCode < 300 ? r.statusCode : `${r.statusCode} ${r.json().code}`;
  const batch = await inject(headers, 'POST', '/billing/usage-updates', {
    reports: [usageReport(sessionId, `${tag}-batch`)],
  });
  return {
    usage: code(await inject(headers, 'POST', '/billing/usage-update', usageReport(sessionId, `${tag}-http`))),
    batch: batch.json().results?.[0]?.status ?? batch.statusCode,
    workload: code(
      await inject(headers, 'POST', `/billing/sessions/${sessionId}/workload/state`, {
        state: 'preparing',
        at: new Date().toISOString(),
      }),
    ),
    // No storage service here: a daemon that may take grants hears 409 WORKLOAD_FILES_UNAVAILABLE, one that may not 403.
    grants: code(
      await inject(headers, 'POST', `/billing/sessions/${sessionId}/workload/grants`, { outputs: ['out.bin'] }),
    ),
  };
}

const REFUSED = {
  usage: '403 NOT_SESSION_PROVIDER',
  batch: 403,
  workload: '403 NOT_SESSION_PROVIDER',
  grants: '403 NOT_SESSION_PROVIDER',
};
const TAKEN = { usage: 201, batch: 201, workload: 200, grants: '409 WORKLOAD_FILES_UNAVAILABLE' };

/** Publishes a usage report over NATS with the daemon's token. */
const publishUsage = async (token: TokenSource, sessionId: string, messageId: string) =>
  publisher.publish(`${usagePrefix}.${sessionId}`, usageReport(sessionId, messageId), {
    msgId: `${sessionId}:${messageId}`,
    headers: { Authorization: `Bearer ${await token.get()}` },
  });

/** A machine registered at the real registry by the daemon `by` (bound to it). */
async function machineOf(ownerId: string, by: { token: TokenSource }): Promise<string> {
  const registered = await fetch(`${platform.registryUrl}/providers`, {
    method: 'POST',
    headers: { ...(await bearer(by.token)), 'content-type': 'application/json' },
    body: JSON.stringify(
      providerBody({ owner_id: ownerId, gpus: [gpu({ model_name: 'NVIDIA H100 80GB HBM3', vram: 81559 })] }),
    ),
  });
  expect(registered.status).toBe(201);
  return ((await registered.json()) as { id: string }).id;
}

/** The owner binds the machine to the daemon client `clientId` at the registry. */
async function rebind(owner: { access_token: string }, machine: string, clientId: string) {
  const res = await fetch(`${platform.registryUrl}/providers/${machine}/daemon`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${owner.access_token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ client_id: clientId }),
  });
  expect(res.status).toBe(200);
}

describe("billing takes a rental's reports from its machine's daemon alone", () => {
  it('refuses a second daemon client of the owner over HTTP and NATS, and follows the owner re-binding the machine', {
    timeout: 60_000,
  }, async () => {
    const { user: owner, tokens } = await platform.verifiedUser(['provider']);
    const first = await daemonClient(owner.id);
    const second = await daemonClient(owner.id);
    const machine = await machineOf(owner.id, first);
    const sessionId = await rentWithWorkload(machine);
    const row = () =>
      billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', sessionId).executeTakeFirstOrThrow();
    expect((await row()).provider_client_id).toBe(first.id);

    // The second daemon of the same owner: every report refused, none applied.
    expect(await reportsAs(second.token, sessionId, 'second')).toEqual(REFUSED);
    await publishUsage(second.token, sessionId, 'second-nats');
    // The machine's own daemon: taken.
    expect(await reportsAs(first.token, sessionId, 'first')).toEqual(TAKEN);
    await publishUsage(first.token, sessionId, 'first-nats');
    await until(
      () => records(sessionId),
      (r) => r.includes('first-nats'),
    );
    expect((await usageRejections()).forbidden).toBe(1);
    expect(await records(sessionId)).toEqual(['first-batch', 'first-http', 'first-nats']);

    // The owner binds the machine to the second client (a reinstall): billing follows the registry's event.
    await rebind(tokens, machine, second.id);
    const moved = await until(row, (s) => s.provider_client_id === second.id);
    expect(moved.provider_client_id).toBe(second.id);
    expect(await reportsAs(first.token, sessionId, 'first-after')).toEqual(REFUSED);
    const after = await reportsAs(second.token, sessionId, 'second-after');
    // The workload is preparing already: the second daemon's report of it is taken, and changes nothing (200).
    expect(after).toEqual(TAKEN);
    await publishUsage(second.token, sessionId, 'second-after-nats');
    await publishUsage(first.token, sessionId, 'first-after-nats');
    await until(
      () => records(sessionId),
      (r) => r.includes('second-after-nats'),
    );
    await until(usageRejections, (r) => r.forbidden === 2);
    expect(await records(sessionId)).toEqual([
      'first-batch',
      'first-http',
      'first-nats',
      'second-after-batch',
      'second-after-http',
      'second-after-nats',
    ]);
    expect((await usageRejections()).forbidden).toBe(2);
  });

  it('without NATS, moves a running session to the client its machine is bound to when it next asks the registry', async () => {
    // A billing of its own, without the registry's events: it asks the registry about machines with running sessions.
    const quiet = await billingWithRegistry(platform);
    try {
      const { user: owner, tokens } = await platform.verifiedUser(['provider']);
      const first = await daemonClient(owner.id);
      const second = await daemonClient(owner.id);
      const machine = await machineOf(owner.id, first);
      const sessionId = await rentWithWorkload(machine, quiet);
      const report = async (d: { token: TokenSource }, tag: string) =>
        (await inject(await bearer(d.token), 'POST', '/billing/usage-update', usageReport(sessionId, tag), quiet))
          .statusCode;
      expect(await report(second, 'before')).toBe(403);
      await rebind(tokens, machine, second.id);
      // Until billing looks, the session keeps the client it started with.
      expect(await report(second, 'unseen')).toBe(403);
      expect(await checkRunningProviders(quiet.ctx)).toEqual([]);
      expect(await report(second, 'after')).toBe(201);
      expect(await report(first, 'first-after')).toBe(403);
    } finally {
      await quiet.close();
    }
  });
});
