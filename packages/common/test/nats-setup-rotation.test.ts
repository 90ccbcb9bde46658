/**
 * Running the NATS set-up again (`writeNatsSetup`: `pnpm start`, compose's auth at each start, `pnpm nats-setup`)
 * issues every service a new user and revokes the one its creds file held: against a nats-server of the test's own in
 * operator mode (Debian's), configured from the set-up's `server/accounts.conf`, a copy of a service's earlier creds
 * file is refused once the server loads the new accounts (a reload), its open connection is closed, and the service's
 * connection comes back with the file's new user, however often it is refused before its file is replaced.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPublisher, fileCredentials, NatsPublisher, serviceInboxPrefix, writeNatsSetup } from '../src/index.ts';
import { firstStatus, freePort, type ServerProcess, spawnProcess } from '../src/testing/index.ts';

let dir: string;
let port: number;
let server: ServerProcess;

/** Resolves once something takes TCP connections on `port`. */
function accepts(at: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(at, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'nats-rotation-'));
  port = await freePort();
  await writeNatsSetup(dir);
  writeFileSync(
    join(dir, 'nats.conf'),
    `listen: 127.0.0.1:${port}\njetstream: { store_dir: ${JSON.stringify(join(dir, 'store'))} }\ninclude "server/accounts.conf"\n`,
  );
  server = spawnProcess('nats-server', ['-c', join(dir, 'nats.conf')], { env: process.env });
  const deadline = Date.now() + 30_000;
  while (!(await accepts(port))) {
    if (server.child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`nats-server did not start:\n${server.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
});
afterAll(async () => {
  if (server.child.exitCode === null) {
    server.child.kill('SIGTERM');
    await server.exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

const servers = () => `nats://127.0.0.1:${port}`;

/** The registry's own inbox prefix: its user reads no other. */
const inboxPrefix = serviceInboxPrefix('provider-registry');

/** Connects once as the registry, with the creds `file` holds, no reconnection. */
const connectOnce = (file: string) =>
  connect({ servers: servers(), authenticator: fileCredentials(file), maxReconnectAttempts: 0, inboxPrefix });

/** Asks JetStream for the account's information, as a service does at its start: the user is admitted and may act. */
async function acts(nc: NatsConnection): Promise<string> {
  const answer = await nc.request('$JS.API.INFO', '', { timeout: 5000 });
  return (answer.json() as { type: string }).type;
}

const ACCOUNT_INFO = 'io.nats.jetstream.api.v1.account_info_response';

/** The users a `revocations.json` revokes (none before the first run that replaced a creds file). */
const revokedIn = (file: string): Record<string, number> =>
  existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')).revoked as Record<string, number>) : {};

describe('the NATS set-up run again', () => {
  it('keeps a service reconnecting through refusals until its creds file is replaced (a Secret that updates late)', async () => {
    const registryCreds = join(dir, 'creds', 'provider-registry.creds');
    const mounted = join(dir, 'mounted.creds');
    copyFileSync(registryCreds, mounted);
    const publisher = await connectPublisher({
      url: servers(),
      name: 'provider-registry',
      credentials: mounted,
      inboxPrefix,
    });
    if (!(publisher instanceof NatsPublisher)) throw new Error('expected a NATS connection');
    const nc = publisher.connection;
    try {
      expect(await acts(nc)).toBe(ACCOUNT_INFO);
      await writeNatsSetup(dir);
      const refusals: unknown[] = [];
      const refused = (async () => {
        for await (const s of nc.status()) {
          if (s.type === 'error') refusals.push(s);
          if (refusals.length >= 3) return;
        }
      })();
      server.child.kill('SIGHUP');
      // Refused again and again with the earlier user (nats.js gives up after two refusals unless told not to)...
      await refused;
      expect(nc.isClosed()).toBe(false);
      // ...until the file holds the new one.
      const back = firstStatus(nc, (s) => s.type === 'reconnect');
      copyFileSync(registryCreds, mounted);
      await back;
      expect(await acts(nc)).toBe(ACCOUNT_INFO);
    } finally {
      await publisher.close();
    }
  });

  it("revokes each service's earlier user: a kept copy is refused after a reload, the service comes back with the new one", async () => {
    const registryCreds = join(dir, 'creds', 'provider-registry.creds');
    const stolen = join(dir, 'stolen.creds');
    copyFileSync(registryCreds, stolen);
    const service = await connect({
      servers: servers(),
      authenticator: fileCredentials(registryCreds),
      reconnectTimeWait: 200,
      maxReconnectAttempts: -1,
      inboxPrefix,
    });
    const thief = await connectOnce(stolen);
    try {
      expect(await acts(thief)).toBe(ACCOUNT_INFO);
      const before = readFileSync(registryCreds, 'utf8');

      const revokedBefore = Object.keys(revokedIn(join(dir, 'revocations.json'))).length;
      const again = await writeNatsSetup(dir);
      expect(readFileSync(registryCreds, 'utf8')).not.toBe(before);
      const revoked = revokedIn(again.revocations);
      expect(Object.keys(revoked)).toHaveLength(revokedBefore + 3);
      // Until the server loads the new accounts, the earlier user still gets in (the running platform is undisturbed).
      const early = await connectOnce(stolen);
      await early.close();

      const closed = thief.closed();
      const back = firstStatus(service, (s) => s.type === 'reconnect');
      server.child.kill('SIGHUP');
      // The server closes the revoked user's connection when it loads the account...
      await closed;
      // ...refuses it from now on...
      await expect(connectOnce(stolen)).rejects.toThrow(/authorization|revoked/i);
      // ...and the service, whose connection was the earlier user's too, reconnects with the file's new one.
      await back;
      expect(await acts(service)).toBe(ACCOUNT_INFO);
      // A third run revokes the second user as well, and keeps the first revoked.
      const third = await writeNatsSetup(dir);
      const revokedThird = revokedIn(third.revocations);
      expect(Object.keys(revokedThird)).toHaveLength(revokedBefore + 6);
      expect(revokedThird).toMatchObject(revoked);
    } finally {
      await thief.close().catch(() => {});
      await service.close();
    }
  });
});
