/**
 * A daemon on a platform whose NATS server runs in operator mode (the tests' server, test-env.sh): it asks the real
 * auth service for a NATS user of its own and works with it alone, no token on a message. Its heartbeats go on
 * subjects naming its owner and itself, which the real registry (`subject_identity`) applies; its usage reports reach
 * billing the same way, as requests billing answers once applied; billing's nudge on the machine's subject (`<nudges>.<owner>.<machine>`) starts its
 * workload at once, with the daemon's polls an hour apart. Its user lives 4 s here: it is renewed and the connection
 * goes on; once its client is revoked, no new user is issued and NATS stops taking its messages at the expiry.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { staticToken } from '@gpu/client';
import { connectPublisher, createLogger, type NatsPublisher, OutboxRelay, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, revokeClient } from '../../../services/auth/src/domain/clients.ts';
import { startUsageConsumer } from '../../../services/billing/src/adapters/usage-consumer.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { priceTheMarket, useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import { rentAtBilling } from '../../../tests/support/rent.ts';
import { issuedNatsIdentity } from '../src/nats-user.ts';
import { type DaemonProcess, startDaemonProcess, stopDaemonProcesses, until } from './support/daemon-process.ts';

const suffix = randomUUID().slice(0, 8);
const subjects = {
  heartbeats: `test.${suffix}.registry.heartbeats`,
  usage: `test.${suffix}.billing.usage`,
  usageReports: `test.${suffix}.billing.usage-reports`,
  events: `test.${suffix}.billing.events`,
};
const nudges = `${subjects.events}.machine`;
const USER_TTL_S = 4;
const platform = useAuthAndRegistry(
  {
    nats: {
      issuer_file: testEnv.natsTrust,
      user_ttl: `${USER_TTL_S}s`,
      heartbeat_subject: subjects.heartbeats,
      usage_reports_subject: subjects.usageReports,
      nudge_subject: nudges,
    },
  },
  { nats: true, takeHeartbeats: true, subjectIdentity: true, heartbeatSubject: subjects.heartbeats },
);
const dir = mkdtempSync(join(tmpdir(), 'daemon-nats-user-'));
const logger = createLogger({ service: 'daemon-nats-user-test', instanceId: 't', level: 'silent' });
let billing: BillingHarness;
let billingUrl: string;
let usageStream: NatsPublisher;
let events: NatsPublisher;
const stops: (() => unknown)[] = [];
const running: DaemonProcess[] = [];
/** The subjects of every heartbeat and usage report on NATS, as a platform service hears them. */
const heard: { subject: string; at: number }[] = [];

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  const stream = `USAGE_NATS_USER_${suffix}`;
  usageStream = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'daemon-nats-user-test',
    stream: { name: stream, subjects: [`${subjects.usage}.>`] },
  })) as NatsPublisher;
  const usage = await startUsageConsumer({
    connection: usageStream.connection,
    ctx: billing.ctx,
    verifier: billing.app.tokenVerifier,
    prefix: subjects.usage,
    subjectIdentity: true,
    reportsPrefix: subjects.usageReports,
    logger,
    stream,
    durable: 'billing-usage',
  });
  // Billing's events (its nudges among them) published as its relay does.
  events = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'daemon-nats-user-events',
  })) as NatsPublisher;
  const relay = new OutboxRelay(billing.db, events, { subject: subjects.events, logger });
  relay.start(100);
  for (const prefix of [subjects.heartbeats, subjects.usage, subjects.usageReports]) {
    const sub = events.connection.subscribe(`${prefix}.>`, {
      callback: (_e, m) => {
        heard.push({ subject: m.subject, at: Date.now() });
      },
    });
    stops.push(() => sub.unsubscribe());
  }
  stops.push(
    () => usage.stop(),
    () => relay.stop(),
  );
  await priceTheMarket(platform);
});
afterAll(async () => {
  // Stopped as an operator would, so that it stops its workloads and leaves no sandbox mounted in the test's folder.
  await stopDaemonProcesses(running);
  for (const stop of stops) await stop();
  await events?.close();
  await usageStream?.close();
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A daemon process with NATS and no credentials file of its own, on a simulated one-GPU machine. */
async function startDaemon() {
  const owner = await platform.providerUser();
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `rig-${randomUUID().slice(0, 8)}`,
    role: 'daemon',
    owner_id: owner.id,
  });
  // The run directory's parents let the workload's user through, as the daemon's workload tests set them.
  chmodSync(dir, 0o711);
  const daemon = await startDaemonProcess(
    dir,
    {
      auth_url: platform.authUrl,
      registry_url: platform.registryUrl,
      billing_url: billingUrl,
      nats_url: testEnv.natsUrl,
      heartbeat_subject: subjects.heartbeats,
      usage_subject: subjects.usage,
      usage_reports_subject: subjects.usageReports,
      credentials: { client_id: client.id, client_secret: secret },
      provider: { name: `rig-${randomUUID().slice(0, 8)}` },
      heartbeat_interval: '500ms',
      gpu: { source: 'simulated', simulated_gpus: [{ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 }] },
      workloads: {
        run_dir: join(dir, `run-${randomUUID().slice(0, 8)}`),
        // Polls an hour apart: a workload that starts at once was started by billing's nudge.
        poll_interval: '1h',
        dispatch_subject: nudges,
        stop_grace: '500ms',
        disk_mb: 64,
        memory_mb: 256,
      },
    },
    60_000,
  );
  running.push(daemon);
  return { ...daemon, owner: owner.id, client: client.id };
}

/** The log lines whose message contains `text`. */
const messages = (log: string[], text: string) =>
  log.filter((line) => {
    try {
      return (JSON.parse(line) as { msg?: string }).msg?.includes(text);
    } catch {
      return false;
    }
  });

describe('a daemon with a NATS user of its own', () => {
  it('heartbeats, reports usage and hears its nudges on subjects naming its owner and itself, renewing its user', {
    timeout: 120_000,
  }, async () => {
    const daemon = await startDaemon();
    const own = `${daemon.owner}.${daemon.client}`;
    expect(messages(daemon.log, 'NATS user issued by auth')).toHaveLength(1);
    // Its heartbeats on its own subject, applied by the registry (its record's last heartbeat moves).
    const beat = `${subjects.heartbeats}.${own}.${daemon.providerId}`;
    expect(
      (
        await until(
          () => heard,
          (h) => h.some((m) => m.subject === beat),
          30_000,
        )
      ).some((m) => m.subject === beat),
    ).toBe(true);
    const seen = async () =>
      (
        await platform.registry.database.db
          .selectFrom('provider_liveness')
          .select('last_seen_at')
          .where('provider_id', '=', daemon.providerId)
          .executeTakeFirstOrThrow()
      ).last_seen_at.getTime();
    const before = await seen();
    expect(await until(seen, (t) => t > before, 15_000)).toBeGreaterThan(before);

    // A rental with a workload: billing's nudge starts it at once (the daemon's next poll is an hour away).
    const session = await rentAtBilling(platform, billing, daemon.providerId, {
      workload: { command: ['sleep', '60'], max_runtime_seconds: 120 },
    });
    const workload = () =>
      billing.app
        .inject({ url: `/api/v1/billing/sessions/${session.id}/workload`, headers: session.headers })
        .then((r) => r.json() as { state: string });
    expect((await until(workload, (w) => w.state === 'running', 30_000)).state).toBe('running');
    // Its usage on its own subject, applied by billing with no token: the machine's reports in one request.
    const report = `${subjects.usageReports}.${own}.${daemon.providerId}`;
    const usage = () =>
      billing.db.selectFrom('usage_records').select('message_id').where('session_id', '=', session.id).execute();
    expect((await until(usage, (u) => u.length > 0, 30_000)).length).toBeGreaterThan(0);
    expect(heard.some((m) => m.subject === report)).toBe(true);
    // Answered by billing on the daemon's own inbox once applied, not sent again over HTTP; nothing into a stream.
    expect(messages(daemon.log, 'NATS did not take')).toEqual([]);
    expect(heard.filter((m) => m.subject.startsWith(`${subjects.usage}.`))).toEqual([]);

    // Several lives of its user later, its heartbeats still go over NATS: it renewed the user before each expiry.
    await new Promise((r) => setTimeout(r, (USER_TTL_S * 2 + 1) * 1000));
    const lately = () => heard.filter((m) => m.subject === beat && m.at > Date.now() - 2000).length;
    expect(await until(lately, (n) => n > 0, 10_000)).toBeGreaterThan(0);
    expect(messages(daemon.log, 'renewing the NATS user failed')).toEqual([]);

    // Its owner revokes the client: auth issues no new user, and NATS takes nothing from it after the last one expires.
    await revokeClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, daemon.client);
    const refused = await until(
      () => messages(daemon.log, 'auth no longer issues this daemon a NATS user'),
      (m) => m.length > 0,
      (USER_TTL_S + 5) * 1000,
    );
    expect(refused).toHaveLength(1);
    await new Promise((r) => setTimeout(r, (USER_TTL_S + 1) * 1000));
    const since = Date.now();
    await new Promise((r) => setTimeout(r, 2000));
    expect(heard.filter((m) => m.subject.includes(own) && m.at >= since)).toEqual([]);
  });

  it('renews a user whose expiry is far off, or no date at all, after a wait: never in a loop', async () => {
    // An auth that issues users expiring 60 days on (past setTimeout's range), then one whose expiry is no date.
    let expiresAt = new Date(Date.now() + 60 * 86_400_000).toISOString();
    let asked = 0;
    const server = createServer((req, res) => {
      req.resume();
      asked++;
      res
        .writeHead(201, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jwt: 'x.y.z', owner_id: randomUUID(), client_id: randomUUID(), expires_at: expiresAt }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const authUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const identities = [];
    try {
      for (const expiry of [expiresAt, 'not-a-date']) {
        expiresAt = expiry;
        asked = 0;
        identities.push(await issuedNatsIdentity({ authUrl, token: staticToken('t'), timeoutMs: 5000, logger }));
        await new Promise((r) => setTimeout(r, 2000));
        expect(asked, expiry).toBe(1);
      }
    } finally {
      for (const identity of identities) identity?.stop();
      server.close();
    }
  });

  it('connects as before where auth issues no NATS users (404, an older auth too), and stops where auth refuses it', async () => {
    // The real auth of this file issues users; an auth that answers as one that does not, or as an older one.
    const answers: Record<string, [number, object]> = {
      disabled: [404, { status: 404, code: 'NATS_USERS_DISABLED', detail: 'none issued' }],
      older: [404, { status: 404, code: 'ROUTE_NOT_FOUND', detail: 'no such route' }],
      revoked: [401, { status: 401, code: 'CLIENT_REVOKED', detail: 'revoked' }],
    };
    let answer: [number, object] = answers.disabled!;
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(answer[0], { 'content-type': 'application/problem+json' }).end(JSON.stringify(answer[1]));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const authUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const ask = () => issuedNatsIdentity({ authUrl, token: staticToken('t'), timeoutMs: 5000, logger });
    try {
      expect(await ask()).toBeUndefined();
      answer = answers.older!;
      expect(await ask()).toBeUndefined();
      answer = answers.revoked!;
      await expect(ask()).rejects.toThrow(/auth refused this daemon a NATS user: 401 CLIENT_REVOKED/);
    } finally {
      server.close();
    }
  });
});
