import { type Caller, connectAsDaemon, firstStatus, freePort, testEnv } from '@gpu/common/testing';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DedicatedNats } from './dedicated-nats.ts';
import { type Harness, providerBody, startHarness } from './helpers.ts';

let h: Harness;
let platform: NatsConnection;
const open: NatsConnection[] = [];

beforeAll(async () => {
  h = await startHarness({ takeHeartbeats: true, subjectIdentity: true });
  platform = await connect(testEnv.natsConnectOptions());
});
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await platform?.close();
  await h?.close();
  await h?.testDb.drop();
});

const prefix = () => h.config.messaging.subjects.heartbeats;

/** A provider, a daemon client of theirs, and a machine that daemon registered (bound to it). */
async function rig() {
  const owner = await h.issuer.user(['provider']);
  const daemon = await h.issuer.client('daemon', owner.id);
  const res = await h.app.inject({
    method: 'POST',
    url: '/providers',
    headers: daemon.headers,
    payload: providerBody({ owner_id: owner.id }),
  });
  expect(res.statusCode, res.body).toBe(201);
  return { owner, daemon, machine: res.json().id as string };
}

/** The daemon's NATS connection with the user auth would issue it (its permissions under this test's prefix). */
async function daemonConnection(owner: Caller, daemon: Caller) {
  const nc = await connectAsDaemon({ owner: owner.id, client: daemon.id }, { heartbeats: prefix() });
  open.push(nc);
  return nc;
}

const lastSeen = async (id: string) =>
  (
    await h.database.db
      .selectFrom('provider_liveness')
      .select('last_seen_at')
      .where('provider_id', '=', id)
      .executeTakeFirstOrThrow()
  ).last_seen_at;

describe('heartbeats whose subject names their sender', () => {
  it("beats the daemon's own machine with no token, answered on its own inbox", async () => {
    const { owner, daemon, machine } = await rig();
    const nc = await daemonConnection(owner, daemon);
    const before = await lastSeen(machine);
    const answer = await nc.request(`${prefix()}.${owner.id}.${daemon.id}.${machine}`, '', { timeout: 20_000 });
    expect(answer.json()).toMatchObject({ status_code: 200, id: machine, status: 'idle' });
    expect((await lastSeen(machine)).getTime()).toBeGreaterThan(new Date(before).getTime());
    // Published without asking: applied all the same.
    const seen = await lastSeen(machine);
    nc.publish(`${prefix()}.${owner.id}.${daemon.id}.${machine}`);
    await expect
      .poll(async () => (await lastSeen(machine)).getTime(), { timeout: 30_000 })
      .toBeGreaterThan(seen.getTime());
  });

  it("cannot beat another owner's machine: the server refuses the subject, and nothing moves", async () => {
    const mine = await rig();
    const theirs = await rig();
    const nc = await daemonConnection(mine.owner, mine.daemon);
    const before = await lastSeen(theirs.machine);
    const refused = firstStatus(nc, (s) => s.type === 'error');
    const subject = `${prefix()}.${theirs.owner.id}.${theirs.daemon.id}.${theirs.machine}`;
    nc.publish(subject);
    nc.publish(`${prefix()}.${theirs.machine}`);
    expect(await refused).toMatchObject({
      type: 'error',
      error: { name: 'PermissionViolationError', operation: 'publish', subject },
    });
    // Its own subject naming their machine passes the server, and the registry refuses it (not its owner's).
    const answer = await nc.request(`${prefix()}.${mine.owner.id}.${mine.daemon.id}.${theirs.machine}`, '', {
      timeout: 20_000,
    });
    expect(answer.json()).toMatchObject({ status_code: 403, problem: { code: 'NOT_PROVIDER_OWNER' } });
    expect(await lastSeen(theirs.machine)).toEqual(before);
  });

  it("keeps a machine to the daemon it is bound to, and answers no inbox but the named client's", async () => {
    const { owner, machine } = await rig();
    const other = await h.issuer.client('daemon', owner.id);
    const before = await lastSeen(machine);
    // The platform's own user may publish anywhere: as another daemon of the owner, its reply subject is not that
    // client's inbox, so no answer comes, and the binding refuses the beat.
    const direct = await platform.request(`${prefix()}.${owner.id}.${other.id}.${machine}`, '', { timeout: 1500 }).then(
      () => 'answered',
      () => 'unanswered',
    );
    expect(direct).toBe('unanswered');
    const nc = await daemonConnection(owner, other);
    const refused = await nc.request(`${prefix()}.${owner.id}.${other.id}.${machine}`, '', { timeout: 20_000 });
    expect(refused.json()).toMatchObject({ status_code: 403, problem: { code: 'NOT_MACHINE_DAEMON' } });
    expect(await lastSeen(machine)).toEqual(before);
  });

  it("answers a daemon client past its share of the heartbeats in hand 503 at once, and takes another client's", async () => {
    const small = await startHarness({
      testDb: h.testDb,
      takeHeartbeats: true,
      subjectIdentity: true,
      heartbeatsPerClient: 2,
    });
    const [a, b] = [await rig(), await rig()];
    const beats = small.config.messaging.subjects.heartbeats;
    const connectAs = async (r: typeof a) => {
      const nc = await connectAsDaemon({ owner: r.owner.id, client: r.daemon.id }, { heartbeats: beats });
      open.push(nc);
      return nc;
    };
    const [ncA, ncB] = [await connectAs(a), await connectAs(b)];
    // a's machine's narrow row locked by another transaction: its beats stay in hand until it is let go.
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let lockTaken = () => {};
    const locked = new Promise<void>((resolve) => (lockTaken = resolve));
    const holder = h.database.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM provider_liveness WHERE provider_id = ${a.machine} FOR UPDATE`.execute(trx);
      lockTaken();
      await released;
    });
    await locked;
    try {
      const beat = (nc: NatsConnection, r: typeof a) =>
        nc
          .request(`${beats}.${r.owner.id}.${r.daemon.id}.${r.machine}`, '', { timeout: 15_000 })
          .then((m) => m.json<Record<string, unknown>>());
      const [first, second] = [beat(ncA, a), beat(ncA, a)];
      // Two in hand: a third from the same client is refused at once.
      expect(await beat(ncA, a)).toMatchObject({ status_code: 503, problem: { code: 'OVERLOADED' } });
      // Another client's is taken, and applied once there is room to.
      const other = beat(ncB, b);
      release();
      await holder;
      expect(await other).toMatchObject({ status_code: 200, id: b.machine });
      expect(await first).toMatchObject({ status_code: 200, id: a.machine });
      expect(await second).toMatchObject({ status_code: 200, id: a.machine });
    } finally {
      release();
      await holder.catch(() => {});
      await small.close();
    }
  });

  it("is not taken from a NATS server that admits anyone: any client could publish any owner's subject there", async () => {
    const nats = new DedicatedNats(await freePort());
    await nats.start();
    const lines: string[] = [];
    const loose = await startHarness({
      testDb: h.testDb,
      takeHeartbeats: true,
      subjectIdentity: true,
      natsUrl: nats.url,
      // The platform's credentials, sent to a server that checks none.
      natsCredentials: testEnv.natsCredentials,
      logDestination: { write: (line: string) => lines.push(line) },
    });
    const stranger = await connect({ servers: nats.url });
    try {
      const { owner, daemon, machine } = await rig();
      const before = await lastSeen(machine);
      const subject = `${loose.config.messaging.subjects.heartbeats}.${owner.id}.${daemon.id}.${machine}`;
      const outcome = await stranger.request(subject, '', { timeout: 1500 }).then(
        () => 'answered',
        (err: Error) => err.message,
      );
      expect(outcome).toMatch(/no responders|timeout/i);
      expect(await lastSeen(machine)).toEqual(before);
      expect(lines.join('')).toContain('the NATS server admits clients without credentials');
    } finally {
      await stranger.close();
      await loose.close();
      await nats.destroy();
    }
  });

  it('is not taken by a registry without the setting', async () => {
    const plain = await startHarness({ testDb: h.testDb, takeHeartbeats: true });
    try {
      const { owner, daemon, machine } = await rig();
      const subject = `${plain.config.messaging.subjects.heartbeats}.${owner.id}.${daemon.id}.${machine}`;
      const outcome = await platform.request(subject, '', { timeout: 1500 }).then(
        () => 'answered',
        (err: Error) => err.message,
      );
      expect(outcome).toMatch(/no responders|timeout/i);
    } finally {
      await plain.close();
    }
  });
});
