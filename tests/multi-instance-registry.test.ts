/**
 * Several provider-registry instances, proven with real processes: two instances (the service's own server entry)
 * on one PostgreSQL and one NATS, the test client spreading heartbeats from many providers over both (round robin
 * over the instances it can reach). One instance is SIGKILLed mid-load and started again. Checked in the registry's
 * own data (its API and its outbox of status events):
 * - every heartbeat answered 200 is stored; a heartbeat whose answer was lost in the kill is stored or not, never
 *   half (each heartbeat carries a counter, `power_draw` = 1, 2, 3 ... per provider, sent one after the other);
 * - requests in flight on the surviving instance finish; no provider is swept offline by the failover;
 * - in a rolling restart (SIGTERM one instance at a time) every heartbeat an instance accepted is answered and
 *   stored, and one it refused (503 while closing, or no connection) is not applied;
 * - the offline sweep, run by both instances every tick, moves each silent provider to offline exactly once (one
 *   event), and a heartbeat sent to both instances at once revives it once.
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { type Database, openDatabase } from '@gpu/common';
import {
  type Caller,
  createTestDatabase,
  freePort,
  type ServerProcess,
  startTestIssuer,
  type TestDatabase,
  type TestIssuer,
  testEnv,
} from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RegistryDB } from '../services/provider-registry/src/db/schema.ts';
import { Instance } from './support/instance.ts';

const registryDir = fileURLToPath(new URL('../services/provider-registry', import.meta.url));
// Long enough that registering the providers on a loaded 2-core machine (the full suite runs beside) leaves none
// silent for that long before the load starts.
const OFFLINE_AFTER_MS = 6000;
const SWEEP_INTERVAL_MS = 200;
const PROVIDERS = 24;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Provider {
  id: string;
  daemon: Caller;
}
interface Beat {
  k: number;
  instance: string;
  sentAt: number;
  /** Whether the request has ended (answered or failed). */
  settled: boolean;
  /** The HTTP status, or undefined when no answer came (the connection failed). */
  status?: number;
  /** When the request ended, and why without an answer: what a failure message shows of a provider's last beats. */
  settledAt?: number;
  error?: string;
}

/** A provider's last beats, for a failure's message. */
function lastBeats(beats: Beat[], n = 4): string {
  return beats
    .slice(-n)
    .map((x) => `${x.k}@${x.instance} ${x.status ?? x.error ?? 'pending'} (${(x.settledAt ?? NaN) - x.sentAt} ms)`)
    .join(', ');
}

/** How long ago a request unanswered by an instance was sent for the test to count it as received there. */
const RECEIVED_AFTER_MS = 1_000;

/**
 * Holds the machines' narrow rows (where a heartbeat moves the clock) locked until `release()`: heartbeats that reach
 * an instance meanwhile wait in its database work.
 */
function holdClocks(ids: string[]) {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  const { promise: locked, resolve: onLocked } = Promise.withResolvers<void>();
  const done = database.db.transaction().execute(async (tx) => {
    await sql`SELECT 1 FROM provider_liveness WHERE provider_id = ANY(${ids}::uuid[]) FOR UPDATE`.execute(tx);
    onLocked();
    await released;
  });
  return { locked, release, done };
}

/**
 * Whether the instance `name` (its database sessions' `application_name`, `registry-<name>`) is inside a heartbeat's
 * write, waiting for a row lock (the clocks `holdClocks` holds): a heartbeat it received and has not answered.
 */
async function workingOnHeldClocks(name: string): Promise<boolean> {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE application_name = ${`registry-${name}`} AND wait_event_type = 'Lock'`.execute(database.db);
  return (rows[0]?.n ?? 0) > 0;
}

/**
 * Heartbeats from each provider, one after the other, over the instances that are up: a test client that spreads
 * load like a load balancer, taking an instance out when it refuses or does not answer (a restart puts it back).
 */
class HeartbeatLoad {
  /** Every load not stopped yet: a test that failed half-way leaves none running into the next (afterEach). */
  static readonly running = new Set<HeartbeatLoad>();
  readonly beats = new Map<string, Beat[]>();
  private stopped = false;
  private paused = false;
  private inFlight = 0;
  private readonly workers: Promise<void>[];
  constructor(
    providers: Provider[],
    private readonly instances: Instance[],
    /** The last counter value each provider sent before (counters continue across loads). */
    counters: Map<string, number>,
  ) {
    this.workers = providers.map((p, i) => this.worker(p, i, counters));
    HeartbeatLoad.running.add(this);
  }
  private async worker(p: Provider, turn: number, counters: Map<string, number>) {
    const beats: Beat[] = [];
    this.beats.set(p.id, beats);
    while (!this.stopped) {
      const live = this.instances.filter((i) => i.up);
      if (this.paused || live.length === 0) {
        await sleep(10);
        continue;
      }
      const target = live[turn++ % live.length] as Instance;
      const k = (counters.get(p.id) ?? 0) + 1;
      counters.set(p.id, k);
      const beat: Beat = { k, instance: target.name, sentAt: Date.now(), settled: false };
      beats.push(beat);
      this.inFlight += 1;
      try {
        const res = await fetch(`${target.url}/providers/${p.id}/heartbeat`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...p.daemon.headers },
          body: JSON.stringify({ gpu_metrics: [{ index: 0, power_draw: k }] }),
          signal: AbortSignal.timeout(15_000),
        });
        await res.arrayBuffer();
        beat.status = res.status;
        // 503: the instance is shutting down and took nothing; the client sends elsewhere from now on.
        if (res.status === 503) target.up = false;
      } catch (err) {
        // No answer (the instance is gone, or died with the request in flight): the client sends elsewhere.
        beat.error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
        target.up = false;
      } finally {
        beat.settledAt = Date.now();
        beat.settled = true;
        this.inFlight -= 1;
      }
      await sleep(25);
    }
  }
  /** The requests to `instance` not answered yet, sent at least `ageMs` ago. */
  inFlightTo(instance: string, ageMs = 0): Beat[] {
    const before = Date.now() - ageMs;
    return [...this.beats.values()].flat().filter((x) => x.instance === instance && !x.settled && x.sentAt <= before);
  }
  /** Sends no new heartbeat until resume(); resolves when none is in flight. */
  async pause() {
    this.paused = true;
    while (this.inFlight > 0) await sleep(5);
  }
  resume() {
    this.paused = false;
  }
  async stop() {
    this.stopped = true;
    HeartbeatLoad.running.delete(this);
    await Promise.all(this.workers);
  }
}

let issuer: TestIssuer;
let admin: Caller;
let testDb: TestDatabase;
let database: Database<RegistryDB>;
let a: Instance;
let b: Instance;
const providers: Provider[] = [];
const counters = new Map<string, number>();

beforeAll(async () => {
  issuer = await startTestIssuer();
  admin = await issuer.user(['admin']);
  testDb = await createTestDatabase('multi_registry');
  const suffix = randomBytes(4).toString('hex');
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    DATABASE_URL: testDb.url,
    NATS_URL: testEnv.natsUrl,
    NATS_CREDENTIALS: testEnv.natsCredentials,
    REGISTRY__MESSAGING__STREAM: `TEST_MULTI_REGISTRY_${suffix}`,
    REGISTRY__MESSAGING__SUBJECTS__STATUS: `test.${suffix}.registry.providers.status`,
    OFFLINE_AFTER: `${OFFLINE_AFTER_MS}ms`,
    REGISTRY__OFFLINE_SWEEP_INTERVAL: `${SWEEP_INTERVAL_MS}ms`,
    LOG_LEVEL: 'warn',
    AUTH_JWKS_URL: issuer.jwksUrl,
  };
  // Each instance's database sessions carry its name (`application_name`): the test sees which one works on what.
  const named = (name: string) => {
    const url = new URL(testDb.url);
    url.searchParams.set('application_name', name);
    return { ...env, INSTANCE_ID: name, DATABASE_URL: url.toString() };
  };
  a = new Instance('a', await freePort(), named('registry-a'), registryDir);
  b = new Instance('b', await freePort(), named('registry-b'), registryDir);
  // One after the other: both migrate the same database (the second finds it done under the migration lock).
  await a.start();
  await b.start();
  database = await openDatabase<RegistryDB>({ url: testDb.url, poolSize: 2, connectTimeoutMs: 2000 });

  for (let i = 0; i < PROVIDERS; i++) {
    const owner = await issuer.user(['provider']);
    const daemon = await issuer.client('daemon', owner.id);
    const res = await fetch(`${(i % 2 ? b : a).url}/providers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...owner.headers },
      body: JSON.stringify({
        owner_id: owner.id,
        name: `rig-${i}`,
        gpus: [{ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, driver_version: '550.54.15' }],
      }),
    });
    if (res.status !== 201) throw new Error(`register: ${res.status} ${await res.text()}`);
    providers.push({ id: ((await res.json()) as { id: string }).id, daemon });
  }
  // One heartbeat each once all are registered: a provider registered first, on a slow machine, may have been swept
  // offline meanwhile (its revival happens here, before any test looks at status changes).
  await beatEach();
}, 120_000);

/** One heartbeat from each provider, through instance a: whichever was swept offline is back. */
async function beatEach() {
  for (const p of providers) {
    const res = await fetch(`${a.url}/providers/${p.id}/heartbeat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...p.daemon.headers },
      body: '{}',
    });
    if (res.status !== 200) throw new Error(`heartbeat: ${res.status} ${await res.text()}`);
  }
}

// A test that failed half-way leaves no load running, no instance down and no provider offline for the next one.
afterEach(async (context) => {
  await Promise.all([...HeartbeatLoad.running].map((load) => load.stop()));
  for (const instance of [a, b]) if (instance && !instance.alive()) await instance.start();
  if (context.task.result?.state === 'fail') await beatEach();
});

afterAll(async () => {
  await Promise.all([a, b].map((i) => i?.kill('SIGTERM')));
  await database?.close();
  await testDb?.drop();
  await issuer?.close();
});

/** A provider as the registry shows it (read through `via`). */
async function read(via: Instance, id: string) {
  const res = await fetch(`${via.url}/providers/${id}`, { headers: admin.headers });
  expect(res.status).toBe(200);
  return (await res.json()) as { status: string; gpus: { power_draw: number | null }[] };
}

/** The status changes (not registrations) the registry recorded for these providers, oldest first. */
/** Status changes of these providers recorded since `since` (the start of the test asking). */
async function statusChanges(ids: string[], since: Date) {
  const rows = await database.db
    .selectFrom('outbox_events')
    .select(['payload', 'created_at'])
    .where('created_at', '>=', since)
    .orderBy('created_at')
    .execute();
  return rows
    .map((r) => r.payload as { provider_id: string; previous_status: string | null; status: string; reason: string })
    .filter((e) => e.previous_status !== null && ids.includes(e.provider_id));
}

/**
 * The stored counter of each provider is that of its last heartbeat answered 200, or of a later one that got no
 * answer (it reached the database before the instance died, or it did not).
 */
async function expectEveryAnsweredHeartbeatStored(load: HeartbeatLoad, via: Instance) {
  const wrong: string[] = [];
  for (const p of providers) {
    const beats = load.beats.get(p.id) ?? [];
    const answered = beats.filter((x) => x.status === 200).at(-1)?.k ?? 0;
    const after = beats.filter((x) => x.k > answered);
    const stored = (await read(via, p.id)).gpus[0]?.power_draw ?? 0;
    const allowed = [answered, ...after.filter((x) => x.status === undefined).map((x) => x.k)];
    if (!allowed.includes(stored))
      wrong.push(`${p.id}: stored ${stored}, answered ${answered}, allowed ${allowed}; last beats ${lastBeats(beats)}`);
  }
  expect(wrong).toEqual([]);
}

describe('two provider-registry instances on one PostgreSQL', () => {
  it('loses no answered heartbeat when one is SIGKILLed mid-load and restarted; the other finishes its requests', {
    timeout: 120_000,
  }, async () => {
    const since = new Date();
    const load = new HeartbeatLoad(providers, [a, b], counters);
    await sleep(1500);
    // Mid-load: killed while it has heartbeats in flight, after it answered some.
    const deadline = Date.now() + 10_000;
    while (load.inFlightTo('a').length < 3 && Date.now() < deadline) await sleep(1);
    const inFlightAtKill = load.inFlightTo('a').length;
    await a.kill('SIGKILL');
    await load.pause();
    const all = () => [...load.beats.values()].flat();
    expect(inFlightAtKill).toBeGreaterThanOrEqual(3);
    expect(all().filter((x) => x.instance === 'a' && x.status === 200).length).toBeGreaterThan(0);
    // Every request to the survivor was answered (those in flight at the kill included), and answered 200.
    expect(all().filter((x) => x.instance === 'b' && x.status !== 200)).toEqual([]);
    expect(all().filter((x) => x.status !== undefined && x.status !== 200)).toEqual([]);
    await expectEveryAnsweredHeartbeatStored(load, b);

    // The survivor carries the load alone while the killed instance starts again, then both share it.
    load.resume();
    await a.start();
    const restartedAt = Date.now();
    await sleep(1500);
    await load.stop();
    const afterRestart = all().filter((x) => x.sentAt >= restartedAt);
    expect(afterRestart.filter((x) => x.status !== 200)).toEqual([]);
    expect(afterRestart.filter((x) => x.instance === 'a').length).toBeGreaterThan(0);
    expect(afterRestart.filter((x) => x.instance === 'b').length).toBeGreaterThan(0);
    await expectEveryAnsweredHeartbeatStored(load, a);
    // Nobody stopped heartbeating, so the sweep (both instances, every 200 ms) found no provider silent.
    expect(
      await statusChanges(
        providers.map((p) => p.id),
        since,
      ),
    ).toEqual([]);
  });

  it('loses no accepted heartbeat in a rolling restart under load (SIGTERM one instance at a time)', {
    timeout: 120_000,
  }, async () => {
    const since = new Date();
    const load = new HeartbeatLoad(providers, [a, b], counters);
    const all = () => [...load.beats.values()].flat();
    for (const instance of [a, b]) {
      await sleep(700);
      // Signalled while it works on requests it has surely received: heartbeats are answered in a few milliseconds,
      // so every machine's clock is held for a moment, and those that reach it wait in its database work.
      // Signalled only once heartbeats are in flight there: sent to it, not answered, and one of them inside its
      // database work, waiting for the held clocks (what PostgreSQL reports of its sessions). A loaded machine takes
      // longer to get there: each hold lasts 4 s at most (far below the client's 15 s patience and the instance's
      // request timeout, past which a request would end unanswered with its write still to come), and is tried again
      // until one works (a minute at most), rather than signalling with none.
      // The requests in flight are read once it waits on the held clocks (read before, they may have been answered
      // by then on a loaded machine, the one waiting sent since): while the clocks are held, these stay unanswered.
      // Only those sent a second or more before count: a request just sent may not have reached the instance yet (on
      // a busy machine it may wait that long for a core to accept or read it), and one the signal finds unread is
      // refused, as any after the signal is (a CI run saw 5 of 10 requests 30 ms old end with no answer).
      const deadline = Date.now() + 60_000;
      let inFlight: Beat[] = [];
      let held: ReturnType<typeof holdClocks>;
      for (;;) {
        held = holdClocks(providers.map((p) => p.id));
        await held.locked;
        const until = Date.now() + 3_000;
        while (Date.now() < until) {
          if (await workingOnHeldClocks(instance.name)) {
            // The clocks stay held meanwhile: what it received stays unanswered.
            await sleep(RECEIVED_AFTER_MS);
            inFlight = load.inFlightTo(instance.name, RECEIVED_AFTER_MS);
            if (inFlight.length > 0) break;
          }
          await sleep(10);
        }
        if (inFlight.length > 0) break;
        held.release();
        await held.done;
        if (Date.now() > deadline) throw new Error(`no heartbeat in flight at instance ${instance.name} within 60 s`);
        await sleep(100);
      }
      // The client keeps sending to it until it refuses (as a load balancer that learns late).
      const signalledAt = Date.now();
      instance.proc?.child.kill('SIGTERM');
      await sleep(100);
      held.release();
      await held.done;
      const { code } = await (instance.proc as ServerProcess).exited;
      expect(code).toBe(0);
      await load.pause();
      // What it was sent before the signal, it answered; after it, it refused (503 while closing, or no connection).
      // "Before" allows the time a request takes to reach it: on a busy host, as long as its slowest answer took (but
      // those held in flight on purpose).
      const sent = all().filter((x) => x.instance === instance.name);
      const reach = Math.max(
        20,
        ...sent
          .filter((x) => x.status === 200 && x.sentAt < signalledAt && !inFlight.includes(x))
          .map((x) => (x.settledAt ?? 0) - x.sentAt),
      );
      expect(
        sent.filter((x) => x.sentAt < signalledAt - reach && x.status !== 200).map((x) => x.status),
        `answers took up to ${reach} ms`,
      ).toEqual([]);
      expect(inFlight.length).toBeGreaterThan(0);
      expect(inFlight.map((x) => x.status)).toEqual(inFlight.map(() => 200));
      for (const x of sent) expect([200, 503, undefined]).toContain(x.status);
      // And nothing it did not answer was applied: each provider shows its last answered heartbeat.
      for (const p of providers) {
        const beats = load.beats.get(p.id) ?? [];
        const answered = beats.filter((x) => x.status === 200).at(-1)?.k ?? 0;
        expect(
          (await read(instance === a ? b : a, p.id)).gpus[0]?.power_draw,
          `${p.id}, last beats ${lastBeats(beats)}`,
        ).toBe(answered);
      }
      load.resume();
      await instance.start();
    }
    await sleep(500);
    await load.stop();
    // The survivor of each step answered everything.
    expect(all().filter((x) => x.status !== 200 && x.status !== 503 && x.status !== undefined)).toEqual([]);
    await expectEveryAnsweredHeartbeatStored(load, a);
    expect(
      await statusChanges(
        providers.map((p) => p.id),
        since,
      ),
    ).toEqual([]);
  });

  it('sweeps each silent provider to offline exactly once with both instances sweeping, and revives it once', {
    timeout: 90_000,
  }, async () => {
    // Every machine beats once first, all at once: one that a test before left silent past the bound (an instance
    // restarting under load) is idle again. The window opens before these beats: on a busy host they can take long
    // enough that the sweep of a silent machine falls inside them, and it is still the one sweep this test expects.
    // Their revivals (offline -> idle, by heartbeat) are in the window too and are not sweeps.
    const since = new Date();
    const silent = providers.slice(0, PROVIDERS / 2);
    const active = providers.slice(PROVIDERS / 2);
    const beatOnce = async (p: Provider) => {
      const res = await fetch(`${a.url}/providers/${p.id}/heartbeat`, { method: 'POST', headers: p.daemon.headers });
      expect(res.status).toBe(200);
    };
    await Promise.all(active.map(beatOnce));
    const load = new HeartbeatLoad(active, [a, b], counters);
    await Promise.all(silent.map(beatOnce));
    const deadline = Date.now() + OFFLINE_AFTER_MS + 15_000;
    const offline = async () =>
      (await Promise.all(silent.map((p, i) => read(i % 2 ? a : b, p.id)))).every((p) => p.status === 'offline');
    while (!(await offline())) {
      expect(Date.now()).toBeLessThan(deadline);
      await sleep(100);
    }
    // Reads say offline as soon as the bound passes; the stored change is the sweepers', who go through the whole
    // table once per a third of the bound (on a busy host, later): wait for it.
    const sweeps = (ids: string[]) =>
      statusChanges(ids, since).then((events) => events.filter((e) => e.reason !== 'heartbeat'));
    const silentIds = silent.map((p) => p.id);
    const sweepDeadline = Date.now() + 30_000;
    while ((await sweeps(silentIds)).length < silentIds.length) {
      expect(Date.now()).toBeLessThan(sweepDeadline);
      await sleep(100);
    }
    // Another whole pass of both sweepers, and a few ticks: nothing more happens to them.
    await sleep(OFFLINE_AFTER_MS / 3 + 5 * SWEEP_INTERVAL_MS);
    await load.stop();

    expect(await sweeps(active.map((p) => p.id))).toEqual([]);
    const swept = await sweeps(silentIds);
    expect(swept.map((e) => e.provider_id).sort()).toEqual([...silentIds].sort());
    for (const e of swept)
      expect(e).toMatchObject({ previous_status: 'idle', status: 'offline', reason: 'offline_timeout' });

    // A heartbeat sent to both instances at once: both answer 200, one of them brings the provider back.
    const revivedSince = new Date();
    for (const p of silent) {
      const answers = await Promise.all(
        [a, b].map(async (i) => {
          const res = await fetch(`${i.url}/providers/${p.id}/heartbeat`, {
            method: 'POST',
            headers: p.daemon.headers,
          });
          expect(res.status).toBe(200);
          return ((await res.json()) as { previous_status: string }).previous_status;
        }),
      );
      expect(answers.sort()).toEqual(['idle', 'offline']);
    }
    const revived = await statusChanges(silentIds, revivedSince);
    expect(revived.map((e) => e.provider_id).sort()).toEqual([...silentIds].sort());
    for (const e of revived)
      expect(e).toMatchObject({ previous_status: 'offline', status: 'idle', reason: 'heartbeat' });
  });
});
