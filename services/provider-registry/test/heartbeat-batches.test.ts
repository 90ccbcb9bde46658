/**
 * Heartbeats at the fleet's rate: several machines' heartbeats in one POST /providers/heartbeats, heartbeats over NATS (each
 * as strict as HTTP), and the rule that metrics that did not change are not written again.
 */
import { randomUUID } from 'node:crypto';
import { type Caller, testEnv } from '@gpu/common/testing';
import { connect, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Beat, recordHeartbeats } from '../src/db/status-repository.ts';
import { EventCollector, gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
let nc: NatsConnection;
let events: EventCollector;
let owner: string;
let daemon: Caller;
const MISSING = '00000000-0000-4000-8000-000000000000';

beforeAll(async () => {
  h = await startHarness({ takeHeartbeats: true });
  nc = await connect(testEnv.natsConnectOptions());
  events = await EventCollector.start(h.subject);
  owner = randomUUID();
  daemon = await h.issuer.client('daemon', owner);
});
afterAll(async () => {
  await events.close();
  await nc.close();
  await h.close();
  await h.testDb.drop();
});

const own = (over: Record<string, unknown> = {}) => register(h.app, { owner_id: owner, gpus: [gpu(), gpu()], ...over });

const read = async (id: string) => (await h.app.inject({ method: 'GET', url: `/providers/${id}` })).json();

const batch = (heartbeats: unknown[], caller: Caller = daemon) =>
  h.app.inject({ method: 'POST', url: '/providers/heartbeats', payload: { heartbeats }, headers: caller.headers });

/** Sends a heartbeat over NATS as a request; its answer. */
async function beat(id: string, body: unknown, authorization: string | null = `Bearer ${daemon.token}`) {
  const hdrs = natsHeaders();
  if (authorization !== null) hdrs.set('Authorization', authorization);
  const payload = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
  const answer = await nc.request(`${h.config.messaging.subjects.heartbeats}.${id}`, payload, {
    headers: hdrs,
    timeout: 20_000,
  });
  return answer.json<Record<string, unknown>>();
}

/** A counter of the app's /metrics (0 before its first count). */
const counter = async (name: string) =>
  Number(
    new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, 'm').exec(
      (await h.app.inject({ method: 'GET', url: '/metrics' })).body,
    )?.[1] ?? 0,
  );

/** The row versions of the provider's GPUs (a write makes a new one). */
const gpuVersions = async (id: string) =>
  (
    await sql<{ v: string }>`SELECT xmin::text AS v FROM gpus WHERE provider_id = ${id} ORDER BY idx`.execute(
      h.database.db,
    )
  ).rows.map((r) => r.v);

describe('POST /providers/heartbeats', () => {
  it("answers each machine's heartbeat in its place: written, another owner's, unknown, a GPU it lacks", async () => {
    const [a, b] = [await own(), await own()];
    const stranger = await register(h.app, { gpus: [gpu()] });
    const strangerBefore = (await read(stranger.id)).last_seen_at;
    const before = await read(a.id);
    await new Promise((r) => setTimeout(r, 5));
    const res = await batch([
      { provider_id: a.id, gpu_metrics: [{ index: 1, temperature: 61 }] },
      { provider_id: stranger.id },
      { provider_id: MISSING },
      { provider_id: b.id, gpu_metrics: [{ index: 5, temperature: 70 }] },
    ]);
    expect(res.statusCode).toBe(200);
    const [first, second, third, fourth] = res.json().results;
    expect(first).toMatchObject({ status_code: 200, id: a.id, previous_status: 'idle', status: 'idle' });
    expect(second).toMatchObject({ status_code: 403, problem: { code: 'NOT_PROVIDER_OWNER' } });
    expect(third).toMatchObject({ status_code: 404, problem: { code: 'PROVIDER_NOT_FOUND' } });
    expect(fourth).toMatchObject({
      status_code: 400,
      problem: { code: 'UNKNOWN_GPU_INDEX', errors: [{ path: 'body.heartbeats.3.gpu_metrics' }] },
    });
    const after = await read(a.id);
    expect(Date.parse(after.last_seen_at)).toBeGreaterThan(Date.parse(before.last_seen_at));
    expect(after.gpus[1].temperature).toBe(61);
    // Nothing of the refused heartbeats was written.
    expect((await read(stranger.id)).last_seen_at).toBe(strangerBefore);
    const untouched = await read(b.id);
    expect(untouched.gpus.map((g: { temperature: unknown }) => g.temperature)).toEqual([null, null]);
  });

  it("applies every heartbeat of one machine in one batch, each one's metrics", async () => {
    const a = await own();
    const res = await batch([
      { provider_id: a.id, gpu_metrics: [{ index: 0, temperature: 61 }] },
      { provider_id: a.id, gpu_metrics: [{ index: 0, utilization_gpu: 50 }] },
      { provider_id: a.id },
    ]);
    expect(res.json().results.map((r: { status_code: number }) => r.status_code)).toEqual([200, 200, 200]);
    const stored = (await read(a.id)).gpus[0];
    expect(stored).toMatchObject({ temperature: 61, utilization_gpu: 50 });
  });

  it("writes nothing of another owner's heartbeats that share a batch with the owner's own", async () => {
    const a = await own();
    const stranger = await h.issuer.client('daemon', randomUUID());
    const [mine, theirs] = await Promise.all([
      batch([{ provider_id: a.id }]),
      batch(
        [{ provider_id: a.id, gpu_metrics: [{ index: 0, temperature: 99, is_healthy: false }, { index: 7 }] }],
        stranger,
      ),
    ]);
    expect(mine.json().results[0].status_code).toBe(200);
    expect(theirs.json().results[0]).toMatchObject({ status_code: 403, problem: { code: 'NOT_PROVIDER_OWNER' } });
    const stored = (await read(a.id)).gpus[0];
    expect(stored.temperature).toBeNull();
    expect(stored.is_healthy).toBe(true);
  });

  it('writes batches sharing machines in opposite orders at once without a deadlock', async () => {
    const machines = await Promise.all(Array.from({ length: 8 }, () => own()));
    // Each batch's beats in a shuffled order, one in four with new metrics (the statement that writes GPU rows too):
    // the statements lock the machines' rows in the order of their key whatever the beats' order and whatever plan
    // PostgreSQL picks, so batches that run at once wait for each other and never deadlock (no retry here: a
    // deadlock would reject).
    const beats = (n: number): Beat[] =>
      machines
        .map((m, i) => ({ m, key: (i * 5 + n * 3) % machines.length }))
        .sort((x, y) => (n % 2 === 0 ? x.key - y.key : y.key - x.key))
        .map(({ m }, i) => ({
          id: m.id,
          owner,
          daemon: null,
          ...(i % 4 === n % 4 ? { metrics: [{ index: 0, temperature: 40 + n }] } : {}),
        }));
    const written = await Promise.all(Array.from({ length: 24 }, (_, n) => recordHeartbeats(h.database.db, beats(n))));
    for (const results of written) {
      expect(results).toHaveLength(machines.length);
      for (const r of results) expect(r).toMatchObject({ previous_status: 'idle', status: 'idle' });
    }
  });

  it("moves the clocks of machines another writer changed while the batch waited for their rows' locks", async () => {
    const [a, b] = [await own(), await own()];
    const clock = async (id: string) =>
      (
        await sql<{ at: Date }>`SELECT last_seen_at AS at FROM provider_liveness WHERE provider_id = ${id}`.execute(
          h.database.db,
        )
      ).rows[0]!.at.getTime();
    const waiting = async () =>
      Number(
        (await sql<{ n: string }>`SELECT count(*) AS n FROM pg_locks WHERE NOT granted`.execute(h.database.db)).rows[0]
          ?.n,
      );
    const hourAgo = Date.now() - 3_600_000;
    // Another writer changes both narrow rows and holds them; the batch (one beat with metrics: both statements'
    // shapes) waits for them, and finds newer versions than its snapshot's once that writer commits.
    const results = await h.database.db.connection().execute(async (other) => {
      await sql`BEGIN`.execute(other);
      await sql`UPDATE provider_liveness SET last_seen_at = ${new Date(hourAgo)}
        WHERE provider_id IN (${a.id}, ${b.id})`.execute(other);
      const beating = Promise.all([
        recordHeartbeats(h.database.db, [{ id: a.id, owner, daemon: null }]),
        recordHeartbeats(h.database.db, [{ id: b.id, owner, daemon: null, metrics: [{ index: 0, temperature: 71 }] }]),
      ]);
      await expect.poll(waiting, { timeout: 30_000 }).toBe(2);
      await sql`COMMIT`.execute(other);
      return beating;
    });
    expect(results.map((r) => r[0])).toEqual([
      expect.objectContaining({ id: a.id, previous_status: 'idle', status: 'idle' }),
      expect.objectContaining({ id: b.id, previous_status: 'idle', status: 'idle' }),
    ]);
    for (const id of [a.id, b.id]) expect(await clock(id)).toBeGreaterThan(hourAgo + 60_000);
    expect((await read(b.id)).gpus[0].temperature).toBe(71);
  });

  it('refuses a malformed batch whole (400), and more than 1,000 heartbeats', async () => {
    const a = await own();
    const before = await read(a.id);
    const bad = await batch([{ provider_id: a.id }, { provider_id: 'not-a-uuid' }]);
    expect(bad.statusCode).toBe(400);
    expect(bad.json().code).toBe('VALIDATION_ERROR');
    expect((await read(a.id)).last_seen_at).toBe(before.last_seen_at);
    const many = await batch(Array.from({ length: 1001 }, () => ({ provider_id: a.id })));
    expect(many.statusCode).toBe(400);
    expect((await batch([])).statusCode).toBe(400);
  });

  it('revives an offline machine once, with one status event, however many of its heartbeats arrive together', async () => {
    const a = await own();
    await h.app.inject({ method: 'PATCH', url: `/providers/${a.id}/status`, payload: { status: 'offline' } });
    const res = await batch(
      Array.from({ length: 6 }, (_, i) => ({
        provider_id: a.id,
        ...(i % 2 ? { gpu_metrics: [{ index: 0, utilization_gpu: i }] } : {}),
      })),
    );
    const results = res.json().results as { previous_status: string; status: string }[];
    expect(results.filter((r) => r.previous_status === 'offline')).toHaveLength(1);
    expect(results.every((r) => r.status === 'idle')).toBe(true);
    await h.app.events.flush();
    await events.waitFor(() => events.about(a.id).some((e) => e.data.reason === 'heartbeat'));
    expect(events.about(a.id).filter((e) => e.data.reason === 'heartbeat')).toHaveLength(1);
  });

  it('writes only the metrics that changed: a GPU reported as stored is not written again', async () => {
    const a = await own();
    const report = [
      { index: 0, utilization_gpu: 50, temperature: 60, power_draw: 200, is_healthy: true },
      { index: 1, utilization_gpu: 10, temperature: 40 },
    ];
    expect((await batch([{ provider_id: a.id, gpu_metrics: report }])).json().results[0].status_code).toBe(200);
    const written = await gpuVersions(a.id);
    const again = await batch([{ provider_id: a.id, gpu_metrics: report }]);
    expect(again.json().results[0].status_code).toBe(200);
    expect(await gpuVersions(a.id)).toEqual(written);
    // One GPU's temperature moved: that GPU alone is written.
    await batch([{ provider_id: a.id, gpu_metrics: [report[0], { ...report[1], temperature: 45 }] }]);
    const [first, second] = await gpuVersions(a.id);
    expect(first).toBe(written[0]);
    expect(second).not.toBe(written[1]);
    expect((await read(a.id)).gpus[1].temperature).toBe(45);
  });

  it('holds a batch while a discovery read runs, and writes it at the bound (50 ms) when the read waits for it', async () => {
    const m = await own();
    const held = () => counter('registry_heartbeat_batches_held_total');
    const heldBefore = await held();
    const before = (await read(m.id)).last_seen_at;
    // The read ends only once the heartbeat is answered: the batch leaves at the hold's bound, not at the read's end.
    const started = performance.now();
    const answer = await h.app.registry.whileAsked(() => batch([{ provider_id: m.id }]));
    const waited = performance.now() - started;
    expect(answer.statusCode).toBe(200);
    expect(answer.json().results[0]).toMatchObject({ id: m.id, status_code: 200 });
    expect(waited).toBeGreaterThanOrEqual(40);
    expect((await read(m.id)).last_seen_at > before).toBe(true);
    expect(await held()).toBe(heldBefore + 1);
  });

  it("applies a GPU's change of health under the machine's rules: a fully unhealthy machine leaves the market", async () => {
    const a = await own({ gpus: [gpu()] });
    const offers = async () =>
      (
        await sql<{ n: number }>`SELECT sum(free_gpus)::int AS n FROM offers WHERE provider_id = ${a.id}`.execute(
          h.database.db,
        )
      ).rows[0]?.n ?? 0;
    expect(await offers()).toBe(1);
    await batch([{ provider_id: a.id, gpu_metrics: [{ index: 0, is_healthy: false }] }]);
    expect((await read(a.id)).gpus[0].is_healthy).toBe(false);
    expect(await offers()).toBe(0);
    await batch([{ provider_id: a.id, gpu_metrics: [{ index: 0, is_healthy: true }] }]);
    expect(await offers()).toBe(1);
  });
});

describe('heartbeats over NATS', () => {
  it("moves the machine's clock and answers as HTTP does, metrics included", async () => {
    const a = await own();
    const before = await read(a.id);
    await new Promise((r) => setTimeout(r, 5));
    const answer = await beat(a.id, { gpu_metrics: [{ index: 0, temperature: 55 }] });
    expect(answer).toMatchObject({ status_code: 200, id: a.id, previous_status: 'idle', status: 'idle' });
    const after = await read(a.id);
    expect(Date.parse(after.last_seen_at)).toBeGreaterThan(Date.parse(before.last_seen_at));
    expect(after.last_seen_at).toBe(answer.last_seen_at);
    expect(after.gpus[0].temperature).toBe(55);
    // An empty message is a heartbeat without metrics.
    expect(await beat(a.id, undefined)).toMatchObject({ status_code: 200 });
  });

  it('revives an offline machine and publishes its status event', async () => {
    const a = await own();
    await h.app.inject({ method: 'PATCH', url: `/providers/${a.id}/status`, payload: { status: 'offline' } });
    expect(await beat(a.id, {})).toMatchObject({ status_code: 200, previous_status: 'offline', status: 'idle' });
    await h.app.events.flush();
    await events.waitFor(() => events.about(a.id).some((e) => e.data.reason === 'heartbeat'));
  });

  it('is as strict as HTTP: no token, a forged one, a renter, an API key, another owner: refused, nothing written', async () => {
    const a = await own();
    const stranger = await h.issuer.client('daemon', randomUUID());
    const renter = await h.issuer.user(['renter'], owner);
    const apiKey = await h.issuer.sign({ sub: owner, roles: ['provider'], scope: 'machines', key_id: randomUUID() });
    const forged = await h.issuer.sign({ sub: owner, roles: ['admin'] }, { forged: true });
    const before = (await read(a.id)).last_seen_at;
    const cases: [string | null, number, string][] = [
      [null, 401, 'MISSING_TOKEN'],
      [`Bearer ${forged}`, 401, 'INVALID_TOKEN'],
      [`Bearer ${renter.token}`, 403, 'ROLE_REQUIRED'],
      [`Bearer ${apiKey}`, 403, 'INSUFFICIENT_SCOPE'],
      [`Bearer ${stranger.token}`, 403, 'NOT_PROVIDER_OWNER'],
    ];
    for (const [authorization, status, code] of cases) {
      const answer = await beat(a.id, {}, authorization);
      expect(answer, code).toMatchObject({ status_code: status, problem: { code } });
    }
    expect((await read(a.id)).last_seen_at).toBe(before);
    const metrics = await h.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toMatch(/registry_heartbeat_messages_rejected_total\{reason="forbidden",[^}]*\} 3\n/);
  });

  it('answers a malformed heartbeat, a GPU the machine lacks and an unknown machine with their problems', async () => {
    const a = await own();
    expect(await beat(a.id, '{"gpu_metrics": [')).toMatchObject({
      status_code: 400,
      problem: { code: 'MALFORMED_JSON' },
    });
    expect(await beat(a.id, { gpu_metrics: [{ index: 0, temperature: 'hot' }] })).toMatchObject({
      status_code: 400,
      problem: { code: 'VALIDATION_ERROR' },
    });
    expect(await beat(a.id, { gpu_metrics: [{ index: 9, temperature: 50 }] })).toMatchObject({
      status_code: 400,
      problem: { code: 'UNKNOWN_GPU_INDEX' },
    });
    expect(await beat('not-a-provider', {})).toMatchObject({ status_code: 400, problem: { code: 'VALIDATION_ERROR' } });
    expect(await beat(MISSING, {})).toMatchObject({ status_code: 404, problem: { code: 'PROVIDER_NOT_FOUND' } });
  });

  it('answers each of the heartbeats that arrive together in its own way, the refused among them writing nothing', async () => {
    const machines = await Promise.all(Array.from({ length: 8 }, () => own()));
    const theirs = await register(h.app, { owner_id: randomUUID(), gpus: [gpu()] });
    const theirsBefore = (await read(theirs.id)).last_seen_at;
    const grouped = () => counter('registry_heartbeats_grouped_total');
    const groupedBefore = await grouped();
    // All sent in one turn: they reach the registry together, and it takes them as one batch of messages.
    const answers = await Promise.all([
      ...machines.map((m, i) => beat(m.id, { gpu_metrics: [{ index: 0, temperature: 40 + i }] })),
      beat(machines[0]!.id, {}, 'Bearer forged'),
      beat(machines[1]!.id, '{"gpu_metrics": ['),
      beat(machines[2]!.id, { gpu_metrics: [{ index: 7, temperature: 50 }] }),
      beat(theirs.id, {}),
      beat(MISSING, {}),
    ]);
    expect(answers.slice(0, 8)).toEqual(
      machines.map((m) => expect.objectContaining({ status_code: 200, id: m.id, status: 'idle' })),
    );
    expect(answers.slice(8).map((a) => [a.status_code, (a.problem as { code: string }).code])).toEqual([
      [401, 'INVALID_TOKEN'],
      [400, 'MALFORMED_JSON'],
      [400, 'UNKNOWN_GPU_INDEX'],
      [403, 'NOT_PROVIDER_OWNER'],
      [404, 'PROVIDER_NOT_FOUND'],
    ]);
    expect(await Promise.all(machines.map(async (m) => (await read(m.id)).gpus[0].temperature))).toEqual(
      machines.map((_, i) => 40 + i),
    );
    expect((await read(theirs.id)).last_seen_at).toBe(theirsBefore);
    // The eight, the GPU it lacks, another owner's and the unknown machine went to the write; the forged and the
    // malformed were refused before it.
    expect((await grouped()) - groupedBefore).toBe(11);
  });

  it("answers only on a requester's inbox, never on another subject it names", async () => {
    const a = await own();
    const elsewhere = `test.${randomUUID()}.not-an-inbox`;
    const seen = nc.subscribe(elsewhere);
    const hdrs = natsHeaders();
    hdrs.set('Authorization', 'Bearer forged');
    nc.publish(`${h.config.messaging.subjects.heartbeats}.${a.id}`, '', { headers: hdrs, reply: elsewhere });
    await nc.flush();
    await new Promise((r) => setTimeout(r, 300));
    expect(seen.getProcessed()).toBe(0);
    seen.unsubscribe();
  });

  it('writes a heartbeat published without asking for an answer', async () => {
    const a = await own();
    const before = (await read(a.id)).last_seen_at;
    await new Promise((r) => setTimeout(r, 5));
    const hdrs = natsHeaders();
    hdrs.set('Authorization', `Bearer ${daemon.token}`);
    nc.publish(`${h.config.messaging.subjects.heartbeats}.${a.id}`, '', { headers: hdrs });
    await nc.flush();
    // Up to 20 s (it stops once written): a busy machine can be slow to write the batch.
    const deadline = Date.now() + 20_000;
    while ((await read(a.id)).last_seen_at === before && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((await read(a.id)).last_seen_at).not.toBe(before);
  });
});
