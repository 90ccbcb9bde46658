/**
 * NATS in operator mode (`messaging/nats-auth.ts`), against the test server, which runs with the trust that
 * scripts/dev/nats-operator.ts wrote: the server admits only users the platform account issued, enforces what each may
 * publish and subscribe to, and drops a user whose JWT expires; a `.creds` file read at each connection
 * (`fileCredentials`) renews a connection's user.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, credsAuthenticator, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fileCredentials,
  PLATFORM_NATS_USERS,
  parseNatsIssuer,
  parseNatsTrust,
  serviceInboxPrefix,
  writeNatsSetup,
} from '../src/index.ts';
import { createNatsTrust, natsUserCreds } from '../src/messaging/nats-auth.ts';
import { connectAsDaemon, firstStatus, testEnv } from '../src/testing/index.ts';

const trust = () => parseNatsTrust(readFileSync(testEnv.natsTrust, 'utf8'));
let dir: string;
let platform: NatsConnection;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'nats-auth-'));
  platform = await connect(testEnv.natsConnectOptions());
});
afterAll(async () => {
  await platform.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Writes `creds` to a file of its own and connects with it. */
async function connectWith(creds: string, name: string) {
  const file = join(dir, `${name}.creds`);
  writeFileSync(file, creds);
  return connect({ servers: testEnv.natsUrl, authenticator: fileCredentials(file), maxReconnectAttempts: 0 });
}

describe('NATS in operator mode', () => {
  it('admits no client without a user of the platform account', async () => {
    await expect(connect({ servers: testEnv.natsUrl, maxReconnectAttempts: 0 })).rejects.toThrow(/authoriz/i);
    // A user signed by another platform's account is a stranger too.
    const stranger = await natsUserCreds(createNatsTrust(), 'stranger');
    await expect(connectWith(stranger, 'stranger')).rejects.toThrow(/authoriz/i);
  });

  it("enforces a user's permissions in the server: a publish outside them reaches nobody", async () => {
    const prefix = `auth-test.${Date.now()}`;
    const limited = await connectWith(
      await natsUserCreds(trust(), 'limited', {
        permissions: { publish: [`${prefix}.mine.*`], subscribe: ['_INBOX.>'] },
      }),
      'limited',
    );
    try {
      const seen: string[] = [];
      const sub = platform.subscribe(`${prefix}.>`, {
        callback: (_e, m) => {
          seen.push(m.subject);
        },
      });
      await platform.flush();
      const refused = firstStatus(limited, (s) => s.type === 'error');
      limited.publish(`${prefix}.mine.a`, 'ok');
      limited.publish(`${prefix}.other.a`, 'not mine');
      const error = await refused;
      expect(String((error as { error?: Error }).error?.message)).toMatch(/permissions violation for publish/i);
      // Its own subject passes; a round trip later, nothing else came.
      await limited.flush();
      await platform.flush();
      // Waited for up to 20 s (1 s by default), which a busy machine can need and costs nothing once it is there.
      await expect.poll(() => seen, { timeout: 20_000 }).toEqual([`${prefix}.mine.a`]);
      sub.unsubscribe();
      // Nor may it listen where it was not allowed.
      const listening = limited.subscribe(`${prefix}.>`);
      await expect(
        (async () => {
          for await (const _ of listening) break;
        })(),
      ).rejects.toThrow(/permissions violation for subscription/i);
    } finally {
      await limited.close().catch(() => {});
    }
  });

  it('drops a user whose JWT expires, and takes the renewed one the credentials file holds at the reconnect', async () => {
    const file = join(dir, 'short.creds');
    writeFileSync(file, await natsUserCreds(trust(), 'short', { expiresInSeconds: 2 }));
    const nc = await connect({
      servers: testEnv.natsUrl,
      authenticator: fileCredentials(file),
      reconnectTimeWait: 200,
      maxReconnectAttempts: 20,
    });
    try {
      // Renewed before it expires: the reconnect after the server drops the expired one uses the new file.
      writeFileSync(file, await natsUserCreds(trust(), 'short', { expiresInSeconds: 600 }));
      const expired = await firstStatus(nc, (s) => s.type === 'error' || s.type === 'disconnect');
      expect(JSON.stringify(expired)).toMatch(/expired|disconnect/i);
      await firstStatus(nc, (s) => s.type === 'reconnect');
      const reply = nc.subscribe('_INBOX.renewed', { max: 1 });
      await nc.flush();
      platform.publish('_INBOX.renewed', 'back');
      for await (const m of reply) expect(m.string()).toBe('back');
    } finally {
      await nc.close();
    }
  });

  it("writes a platform's set-up once: the services' users publish under their own prefixes, the registry answers a daemon", async () => {
    const setupDir = join(dir, 'setup');
    const first = await writeNatsSetup(setupDir);
    const again = await writeNatsSetup(setupDir);
    // The trust is kept: a second run (a restart) issues from the same keys, so the running server still admits all.
    expect(readFileSync(again.trust, 'utf8')).toBe(readFileSync(first.trust, 'utf8'));
    expect(Object.keys(first.creds).sort()).toEqual(['billing', 'provider-registry', 'storage']);
    expect(parseNatsIssuer(readFileSync(first.issuer, 'utf8'))).toEqual({
      account: JSON.parse(readFileSync(first.trust, 'utf8')).account,
      signer: JSON.parse(readFileSync(first.trust, 'utf8')).signer,
    });
    for (const file of [first.trust, first.issuer, ...Object.values(first.creds)]) {
      expect((statSync(file).mode & 0o777).toString(8), file).toBe('600');
    }
    // The users of the tests' server's trust with the set-up's permissions (same code, the server's keys).
    const as = async (name: keyof typeof PLATFORM_NATS_USERS) =>
      connectWith(await natsUserCreds(trust(), name, { permissions: PLATFORM_NATS_USERS[name] }), `setup-${name}`);
    const registry = await as('provider-registry');
    const storage = await as('storage');
    const owner = randomUUID();
    const client = randomUUID();
    const daemon = await connectAsDaemon({ owner, client });
    try {
      // The registry answers a daemon's heartbeat request on the daemon's own inbox.
      registry.subscribe(`registry.heartbeats.${owner}.${client}.*`, {
        callback: (_e, m) => {
          m.respond('ok');
        },
      });
      await registry.flush();
      const answer = await daemon.request(`registry.heartbeats.${owner}.${client}.${randomUUID()}`, 'beat', {
        timeout: 5000,
      });
      expect(answer.string()).toBe('ok');
      // Storage may not write billing's events.
      const refused = firstStatus(storage, (s) => s.type === 'error');
      storage.publish('billing.events.session.started', '{}');
      expect(String(((await refused) as { error?: Error }).error?.message)).toMatch(
        /permissions violation for publish/i,
      );
      storage.publish(`storage.usage.${randomUUID()}`, '{}');
      await storage.flush();
    } finally {
      for (const nc of [registry, storage, daemon]) await nc.close().catch(() => {});
    }
  });

  it("holds a daemon's messages to 256 KiB: the server tells its client so, which refuses a larger one", async () => {
    const [owner, client] = [randomUUID(), randomUUID()];
    const daemon = await connectAsDaemon({ owner, client });
    try {
      expect(daemon.info?.max_payload).toBe(256 * 1024);
      // On its own subject, where it may publish.
      const own = `registry.heartbeats.${owner}.${client}.${randomUUID()}`;
      expect(() => daemon.publish(own, new Uint8Array(300 * 1024))).toThrow(/max_payload/);
      daemon.publish(own, new Uint8Array(200 * 1024));
      await daemon.flush();
    } finally {
      await daemon.close().catch(() => {});
    }
  });

  it("keeps each service to its own streams, consumers and inbox: no purge, no other's consumer, no other's answers", async () => {
    const violations: string[] = [];
    const as = async (name: keyof typeof PLATFORM_NATS_USERS) => {
      const nc = await connect({
        servers: testEnv.natsUrl,
        authenticator: credsAuthenticator(
          new TextEncoder().encode(await natsUserCreds(trust(), name, { permissions: PLATFORM_NATS_USERS[name] })),
        ),
        inboxPrefix: serviceInboxPrefix(name),
        maxReconnectAttempts: 0,
      });
      void (async () => {
        for await (const s of nc.status()) {
          if (s.type === 'error') violations.push(`${name}: ${(s.error as Error).message}`);
        }
      })();
      return nc;
    };
    const billing = await as('billing');
    const storage = await as('storage');
    const refused = (what: RegExp) =>
      expect.poll(() => violations.filter((v) => what.test(v)), { timeout: 20_000 }).toHaveLength(1);
    try {
      // Billing reads its own consumer's API (answered on its own inbox: nothing there yet, but answered).
      const jsm = await jetstreamManager(billing);
      await expect(jsm.consumers.info('BILLING_USAGE', 'billing-usage')).rejects.toThrow(/not found/);
      // Storage may neither purge nor delete billing's usage stream, nor read billing's consumer, nor ask JetStream
      // to make a consumer of its own on it.
      for (const subject of [
        '$JS.API.STREAM.PURGE.BILLING_USAGE',
        '$JS.API.STREAM.DELETE.BILLING_USAGE',
        '$JS.API.CONSUMER.MSG.NEXT.BILLING_USAGE.billing-usage',
        '$JS.API.CONSUMER.CREATE.BILLING_USAGE.spy',
      ]) {
        storage.publish(subject, '{}');
        await refused(
          new RegExp(`storage: .*publish to "${subject.replaceAll('$', '\\$').replaceAll('.', '\\.')}"`, 'i'),
        );
      }
      // Billing may not send itself a request (whose reply subject it could then answer on: one to delete a stream),
      // nor answer anywhere but an inbox.
      for (const subject of ['billing.usage-reports.a.b.c', '$JS.API.STREAM.DELETE.REGISTRY']) {
        billing.publish(subject, '{}', { reply: '$JS.API.STREAM.DELETE.REGISTRY' });
        await refused(
          new RegExp(`billing: .*publish to "${subject.replaceAll('$', '\\$').replaceAll('.', '\\.')}"`, 'i'),
        );
      }
      // Nor listen to another's answers, or to every inbox.
      for (const subject of [`${serviceInboxPrefix('billing')}.>`, '_INBOX.>']) {
        storage.subscribe(subject);
        await refused(new RegExp(`storage: .*subscription to "${subject.replaceAll('.', '\\.')}"`, 'i'));
      }
    } finally {
      for (const nc of [billing, storage]) await nc.close().catch(() => {});
    }
  });
});
