/**
 * Running the NATS set-up again (`writeNatsSetup`: `pnpm start`, compose's auth at each start, `pnpm nats-setup`)
 * issues every service a new user, signed by the run's own signing key, and the account's JWT lists no earlier run's
 * key, so the user its creds file held stops working without a revocation list that grows: against a nats-server of the test's own in
 * operator mode (Debian's), configured from the set-up's `server/accounts.conf`, a copy of a service's earlier creds
 * file is refused once the server loads the new accounts (a reload), its open connection is closed, and the service's
 * connection comes back with the file's new user, however often it is refused before its file is replaced.
 */
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decode, parseCreds } from '@nats-io/jwt';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectPublisher,
  fileCredentials,
  NatsPublisher,
  natsUserCreds,
  parseNatsTrust,
  serviceInboxPrefix,
  writeNatsSetup,
} from '../src/index.ts';
import { firstStatus, freePort, type ServerProcess, spawnProcess, waitForTcp } from '../src/testing/index.ts';

let dir: string;
let port: number;
let server: ServerProcess;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'nats-rotation-'));
  port = await freePort();
  await writeNatsSetup(dir);
  writeFileSync(
    join(dir, 'nats.conf'),
    `listen: 127.0.0.1:${port}\njetstream: { store_dir: ${JSON.stringify(join(dir, 'store'))} }\ninclude "server/accounts.conf"\n`,
  );
  server = spawnProcess('nats-server', ['-c', join(dir, 'nats.conf')], { env: process.env });
  await waitForTcp(port, server);
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

/** A `users.json`'s record. */
const recordIn = (file: string) =>
  (existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : { revoked: {} }) as {
    account: string;
    signer?: string;
    issued: Record<string, { key: string; at: number; signer?: string }>;
    revoked: Record<string, number>;
  };

/** The users a `users.json` revokes. */
const revokedIn = (file: string): Record<string, number> => recordIn(file).revoked;

/** The platform account's JWT claims as the server's configuration `accounts` (next to `users`) preloads them. */
function accountJwtIn(users: string, accounts: string) {
  const { account } = recordIn(users);
  const jwt = new RegExp(`^  ${account}: "([^"]+)"$`, 'm').exec(readFileSync(accounts, 'utf8'))?.[1];
  return decode<{ signing_keys: string[]; revocations?: Record<string, number> }>(jwt!).nats;
}

/** Replaces `file` with `from`'s content in one step, as the kubelet updates a mounted Secret. */
function replaceWith(file: string, from: string) {
  writeFileSync(`${file}.tmp`, readFileSync(from));
  renameSync(`${file}.tmp`, file);
}

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
      // The server's refusals of the earlier user at the reconnections (nats.js stops after two unless told not to).
      let refusals = 0;
      const refused = (async () => {
        for await (const s of nc.status()) {
          if (s.type === 'error' && /authorization violation/i.test(String(s.error))) refusals++;
          if (refusals >= 3) return;
        }
      })();
      server.child.kill('SIGHUP');
      // Refused again and again with the earlier user...
      await refused;
      expect(nc.isClosed()).toBe(false);
      // ...until the file holds the new one.
      const back = firstStatus(nc, (s) => s.type === 'reconnect');
      replaceWith(mounted, registryCreds);
      await back;
      expect(await acts(nc)).toBe(ACCOUNT_INFO);
    } finally {
      await publisher.close();
    }
  });

  it("ends each service's earlier user: a kept copy is refused after a reload, the service comes back with the new one", async () => {
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

      const signerBefore = recordIn(join(dir, 'users.json')).signer;
      const again = await writeNatsSetup(dir);
      expect(readFileSync(registryCreds, 'utf8')).not.toBe(before);
      // The run's own signing key signed the new users; the account lists it, and no longer the earlier run's.
      const { signer } = recordIn(again.users);
      expect(signer).toMatch(/^A[A-Z2-7]{55}$/);
      expect(signer).not.toBe(signerBefore);
      expect(accountJwtIn(again.users, again.accounts).signing_keys).toContain(signer);
      expect(accountJwtIn(again.users, again.accounts).signing_keys).not.toContain(signerBefore);
      expect(decode(readFileSync(registryCreds, 'utf8').split('\n')[1]!).iss).toBe(signer);
      // Nothing is revoked one by one: the list that the account's JWT carries does not grow at each run.
      expect(revokedIn(again.users)).toEqual({});
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
      // A third run leaves the second run's key out as well, and still revokes no one by name.
      const third = await writeNatsSetup(dir);
      const keys = accountJwtIn(third.users, third.accounts).signing_keys;
      expect(keys).not.toContain(signer);
      expect(keys).toHaveLength(2);
      expect(accountJwtIn(third.users, third.accounts).revocations).toBeUndefined();
    } finally {
      await thief.close().catch(() => {});
      await service.close();
    }
  });

  it("revokes the users an earlier set-up signed with the trust's own key, those of its record and of creds files, once", async () => {
    const own = mkdtempSync(join(tmpdir(), 'nats-users-'));
    try {
      const first = await writeNatsSetup(own);
      // A folder as a set-up before the run's keys left it: each service's user signed by the trust's signing key,
      // recorded without a signer; one file lost since, one user in a file only (written before there was a record).
      const trust = parseNatsTrust(readFileSync(first.trust, 'utf8'));
      const legacy = async (name: string) => {
        const text = await natsUserCreds(trust, name);
        const { uc } = await parseCreds(new TextEncoder().encode(text));
        writeFileSync(join(own, 'creds', `${name}.creds`), text);
        return { key: uc.sub, at: uc.iat };
      };
      const issued = { storage: await legacy('storage'), 'provider-registry': await legacy('provider-registry') };
      const fileOnly = await legacy('billing');
      writeFileSync(first.users, JSON.stringify({ account: recordIn(first.users).account, issued, revoked: {} }));
      unlinkSync(first.creds['provider-registry']!);
      // Another account's creds file (a set-up before a new trust) lies in the folder too.
      writeFileSync(join(own, 'creds', 'foreign.creds'), readFileSync(join(dir, 'creds', 'storage.creds')));
      const foreignKey = recordIn(join(dir, 'users.json')).issued.storage!.key;

      const second = await writeNatsSetup(own);
      const revoked = revokedIn(second.users);
      expect(Object.keys(revoked).sort()).toEqual(
        [issued.storage.key, issued['provider-registry'].key, fileOnly.key].sort(),
      );
      expect(revoked[issued['provider-registry'].key]).toBeGreaterThanOrEqual(issued['provider-registry'].at);
      expect(revoked[foreignKey]).toBeUndefined();
      // The account's JWT in the server's configuration names them.
      expect(accountJwtIn(second.users, second.accounts).revocations).toEqual(revoked);
      // A later run keeps them and adds no one: its predecessor's users go with their signing key.
      const third = await writeNatsSetup(own);
      expect(revokedIn(third.users)).toEqual(revoked);
      // A record that is not one stops the run, naming the file, rather than forget the users it revokes.
      writeFileSync(third.users, '{"account": "x", "revoked": ');
      await expect(writeNatsSetup(own)).rejects.toThrow(/users\.json: not JSON/);
    } finally {
      rmSync(own, { recursive: true, force: true });
    }
  });
});
