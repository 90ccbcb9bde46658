/**
 * NATS in operator mode (`messaging/nats-auth.ts`), against the test server, which runs with the trust that
 * scripts/dev/nats-operator.ts wrote: the server admits only users the platform account issued, enforces what each may
 * publish and subscribe to, and drops a user whose JWT expires; a `.creds` file read at each connection
 * (`fileCredentials`) renews a connection's user.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileCredentials, parseNatsTrust } from '../src/index.ts';
import { createNatsTrust, natsUserCreds } from '../src/messaging/nats-auth.ts';
import { firstStatus, testEnv } from '../src/testing/index.ts';

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
      await expect.poll(() => seen).toEqual([`${prefix}.mine.a`]);
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
});
