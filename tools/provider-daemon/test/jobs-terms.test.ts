/**
 * A job's terms kept, against the real auth service, registry (publishing its status events on NATS), storage and
 * billing (reading those events as the platform's does, its own background placing jobs) and daemons running
 * workloads in the sandbox: retries on failure and the attempts that end them, the queue timeout, the spend cap over
 * all attempts, the cheapest machine, a placement woken by capacity appearing, the checkpoint kept when the workload
 * is told to stop (and never replaced by a broken upload), nothing held after a cancel, logs followed across
 * attempts, and `recovering` between a lost attempt and the next.
 *
 * Billing's placer runs every hour here, and tries a job no offer fitted again an hour later: every placement is
 * woken (a job submitted, a session ended, a machine's status changed, a queue timeout due), as on a platform between
 * its rounds. Each test has machines in a region of
 * its own, which its jobs name, so no test's job lands on another's machine.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectPublisher, createLogger, type NatsPublisher, NoopPublisher } from '@gpu/common';
import { lockWaiters, testEnv } from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import {
  type RegistryEventsConsumer,
  startRegistryEventsConsumer,
} from '../../../services/billing/src/adapters/registry-events-consumer.ts';
import { type Background, startBackground } from '../../../services/billing/src/background.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import { gpuAt } from '../../cli/test/support/gpu.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { ended, type JobJson, jobsOn, type RigMachine } from './support/jobs.ts';
import { startStoreProxy } from './support/store-proxy.ts';
import { type Renter, until, useWorkloadRig } from './support/workload-rig.ts';

const isRoot = process.getuid?.() === 0;
// A round an hour, and a job no offer fits tried again an hour later: only what wakes the placer places it sooner. A
// job placed again waits up to 10 minutes for its last attempt's final checkpoint: only the daemon's word ends it.
const JOBS = { place_interval: '1h', placing_timeout: '60s', retry_interval: '1h', final_checkpoint_wait: '10m' };
// The daemons' uploads and downloads go through a proxy that can break them off (the storage service's presigned
// URLs point at it).
const proxy = await startStoreProxy(testEnv.s3Endpoint);
const rig = useWorkloadRig({
  storage: { objectStore: { public_endpoint: proxy.url } },
  billing: { jobs: JOBS },
  registry: { nats: true },
});
const jobs = jobsOn(rig);
const logger = createLogger({ service: 'jobs-terms-test', instanceId: 't', level: 'silent' });
let nats: NatsPublisher | undefined;
let events: RegistryEventsConsumer | undefined;
let background: Background | undefined;
/** The machines kept online (a heartbeat every 5 s); one a test takes out of the market is taken out of it. */
const online = new Set<RigMachine>();
let heartbeats: NodeJS.Timeout | undefined;
/** Who reads the market (a renter's token). */
let marketReader: Record<string, string> = {};

beforeAll(async () => {
  await rig.priceTheMarket();
  marketReader = (await rig.renter()).headers;
  nats = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'jobs-terms-test',
  })) as NatsPublisher;
  // Billing hears of the registry's status changes as the platform's does: its consumer of the registry's events.
  events = startRegistryEventsConsumer({
    connection: nats.connection,
    ctx: rig.billing.ctx,
    subject: rig.platform.registry.subject,
    durable: `billing-provider-status-${randomUUID().slice(0, 8)}`,
    logger,
  });
  background = await startBackground(rig.billing.ctx, rig.billing.config, new NoopPublisher(), undefined, null);
  heartbeats = setInterval(() => {
    for (const m of online) m.daemon.heartbeat().catch(() => {});
  }, 5_000);
}, 60_000);

afterAll(async () => {
  clearInterval(heartbeats);
  await background?.stop();
  await events?.stop();
  await nats?.close();
  await proxy.close();
});

/** A region of the market no other test's machines are in. */
const newRegion = () => `terms-${randomUUID().slice(0, 8)}`;

/**
 * `count` machines in `region` (8 GPUs each, of `gpus` when given), online, their workloads run until the test ends.
 */
async function machinesIn(
  region: string,
  count: number,
  gpus?: { name: string; memory_total_mib: number }[],
): Promise<RigMachine[]> {
  const made: RigMachine[] = [];
  for (let i = 0; i < count; i++) {
    const m = await rig.machine({}, { location: region, ...(gpus ? { gpus } : {}) });
    await m.daemon.heartbeat();
    const runner = m.runner();
    runner.run();
    online.add(m);
    onTestFinished(async () => {
      online.delete(m);
      await runner.stop();
    });
    made.push(m);
  }
  return made;
}

/** The market's offers in `region`, cheapest first, as any renter or scheduler reads them. */
async function offersIn(region: string): Promise<{ provider_id: string; price_per_gpu_hour: string }[]> {
  const res = await rig.platform.registry.app.inject({
    url: `/offers?region=${region}&sort=price`,
    headers: marketReader,
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

/** The job once its latest attempt's workload runs. */
async function runningJob(renter: Renter, id: string): Promise<JobJson> {
  const seen = await until(
    async () => {
      const j = await jobs.job(renter, id);
      return { j, w: j.session_id ? await rig.workloadOf(renter.headers, j.session_id) : null };
    },
    (v) => v.j.state === 'running' && v.w?.state === 'running',
    40_000,
  );
  expect(seen.j.state, JSON.stringify(seen.j)).toBe('running');
  expect(seen.w?.state).toBe('running');
  return seen.j;
}

/** The sum of the attempts' costs, exactly (6 places). */
const costOf = (attempts: { cost: string | null }[]) =>
  attempts.reduce((sum, a) => sum + Math.round(Number(a.cost) * 1e6), 0) / 1e6;

describe("a job's terms", () => {
  it('places a job whose workload exits non-zero again when its renter asked for retries, until its attempts end it', {
    timeout: 90_000,
  }, async () => {
    const region = newRegion();
    const [first, second] = await machinesIn(region, 2);
    const renter = await rig.renter();
    const res = await jobs.submit(renter, {
      region,
      max_attempts: 2,
      retry_on_failure: true,
      workload: { command: ['sh', '-c', 'echo "ran in $GPU_PLATFORM_SESSION_ID"; exit 3'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({ retry_on_failure: true, max_attempts: 2 });
    const done = await until(() => jobs.job(renter, res.json().id), ended, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({
      state: 'failed',
      reason: 'workload_exited: the workload exited with 3; attempts_exhausted: 2 used',
    });
    // Two attempts, each a session of its own whose workload ran and exited 3: the second on the other machine.
    expect(done.attempts).toHaveLength(2);
    expect(done.attempts.map((a: JobJson) => a.end_reason)).toEqual(['workload_exited', 'workload_exited']);
    expect(new Set(done.attempts.map((a: JobJson) => a.provider_id))).toEqual(
      new Set([first!.providerId, second!.providerId]),
    );
    for (const a of done.attempts) {
      const w = await rig.workloadOf(renter.headers, a.session_id);
      expect(w).toMatchObject({ state: 'exited', exit_code: 3 });
    }
    expect(Number(done.spent)).toBeCloseTo(costOf(done.attempts), 6);
  });

  it.skipIf(!isRoot)(
    'places a failed attempt again only once its final checkpoint is kept, and says when none comes',
    { timeout: 90_000 },
    async () => {
      const region = newRegion();
      const machines = await machinesIn(region, 2);
      const renter = await rig.renter();
      // The first attempt writes its state at the very end and fails; the second finds it, or fails the same way.
      // Nothing periodic (an hour apart): only the final checkpoint, kept after the end was reported, carries it.
      const script =
        'd=$GPU_PLATFORM_CHECKPOINT_DIR; if [ -f "$d/state" ]; then echo "resumed at $(cat "$d/state")"; exit 0; fi; ' +
        'echo "step 41" > "$d/state.tmp"; mv "$d/state.tmp" "$d/state"; exit 3';
      const res = await jobs.submit(renter, {
        region,
        max_attempts: 2,
        retry_on_failure: true,
        workload: { command: ['sh', '-c', script], max_runtime_seconds: 60, checkpoint: { interval_seconds: 3600 } },
      });
      expect(res.statusCode, res.body).toBe(201);
      const done = await until(() => jobs.job(renter, res.json().id), ended, 60_000);
      expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded' });
      const [first, second] = done.attempts;
      expect(first.end_reason).toBe('workload_exited');
      // The second attempt started from the first's final checkpoint, said whole before it was placed (the job's
      // checkpoint may name the second's own final one by now).
      const log = await jobs.object(renter, `sessions/${second.session_id}/logs/stdout.log`);
      expect(log.toString()).toBe('resumed at step 41\n');

      // A workload that leaves no checkpoint directory (it removed it): its daemon says none comes, and the job is
      // placed again at once, not after the ten minutes it would otherwise wait.
      const none = await jobs.submit(renter, {
        region,
        max_attempts: 2,
        retry_on_failure: true,
        workload: {
          command: ['sh', '-c', 'rmdir "$GPU_PLATFORM_CHECKPOINT_DIR" && exit 3'],
          max_runtime_seconds: 60,
          checkpoint: { interval_seconds: 3600 },
        },
      });
      const failed = await until(() => jobs.job(renter, none.json().id), ended, 60_000);
      if (!ended(failed)) {
        // Where the daemon's word stopped: billing's rows of the job and of its attempt's workload, and the daemon's
        // record of the session's files (gone once it is done with them).
        const job = await rig.billing.db
          .selectFrom('jobs')
          .selectAll()
          .where('id', '=', none.json().id)
          .executeTakeFirst();
        const workload = job?.session_id
          ? await rig.billing.db
              .selectFrom('session_workloads')
              .select(['state', 'ended_at', 'final_checkpoint_at', 'updated_at'])
              .where('session_id', '=', job.session_id)
              .executeTakeFirst()
          : undefined;
        const records = machines.map((m) => {
          try {
            return readFileSync(join(m.runDir, job?.session_id ?? '-', 'keep.json'), 'utf8');
          } catch (e) {
            return String((e as Error).message);
          }
        });
        throw new Error(`the job did not end: ${JSON.stringify({ job, workload, records })}`);
      }
      expect(failed, JSON.stringify(failed)).toMatchObject({
        state: 'failed',
        reason: 'workload_exited: the workload exited with 3; attempts_exhausted: 2 used',
        checkpoint: null,
      });
    },
  );

  it("hears its daemon's word that no final checkpoint comes even while its attempt is being settled", {
    timeout: 60_000,
  }, async () => {
    const region = newRegion();
    const [machine] = await machinesIn(region, 1);
    const renter = await rig.renter();
    const res = await jobs.submit(renter, {
      region,
      workload: { command: ['sleep', '60'], max_runtime_seconds: 60, checkpoint: { interval_seconds: 3600 } },
    });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().id;
    const running = await runningJob(renter, id);
    // Settling the attempt as its placer does: the job's lock held, the word read as not come, the job set to wait
    // for it, not committed yet. The daemon's word comes meanwhile: it waits for the lock, then ends that wait (read
    // without the lock, the job would still show no wait, and it would wait out `jobs.final_checkpoint_wait`).
    let said: Promise<{ statusCode: number; body: string }> | undefined;
    let answered = false;
    await rig.billing.db.transaction().execute(async (trx) => {
      const holder = (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx)).rows[0]!.pid;
      await trx.selectFrom('jobs').select('id').where('id', '=', id).forUpdate().execute();
      await trx
        .updateTable('jobs')
        .set({ final_checkpoint_until: new Date(Date.now() + 600_000) })
        .where('id', '=', id)
        .execute();
      said = rig.billing.app
        .inject({
          method: 'POST',
          url: `/api/v1/billing/sessions/${running.session_id}/workload/checkpoint`,
          headers: { authorization: `Bearer ${await machine!.deps.token.get()}` },
          payload: { size: null },
        })
        .finally(() => {
          answered = true;
        });
      // (Only a wait on this transaction counts: the platform's background rounds wait on locks of their own.)
      await lockWaiters(rig.billing.db, 1, { blockedBy: holder });
      expect(answered, 'the word was taken before the settling committed').toBe(false);
    });
    const word = await said!;
    expect(word.statusCode, word.body).toBe(204);
    const row = await rig.billing.db
      .selectFrom('jobs')
      .select('final_checkpoint_until')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row.final_checkpoint_until).toBeNull();
    expect((await jobs.cancel(renter, id)).state).toBe('cancelled');
  });

  it('ends a queued job that no machine took within its queue timeout, with that reason, holding nothing', {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    // No machine is in this region: the job waits, and nothing but its deadline wakes the placer for it.
    const res = await jobs.submit(renter, {
      region: newRegion(),
      // Long enough for the placer's first look to come before it, however busy the machine.
      queue_timeout_seconds: 8,
      workload: { command: ['true'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const submitted = res.json();
    expect(Date.parse(submitted.queued_until) - Date.parse(submitted.created_at)).toBe(8000);
    const waiting = await until(
      () => jobs.job(renter, submitted.id),
      (j) => j.reason !== 'waiting for a machine',
      8_000,
    );
    expect(waiting).toMatchObject({ state: 'queued', reason: 'no offer meets its terms now' });
    const done = await until(() => jobs.job(renter, submitted.id), ended, 40_000);
    expect(done, JSON.stringify(done)).toMatchObject({
      state: 'failed',
      reason: 'queue_timeout: no machine met its terms before its queue timeout',
      attempts: [],
      spent: '0.000000',
    });
    expect(Date.parse(done.ended_at)).toBeGreaterThanOrEqual(Date.parse(submitted.queued_until));
    expect(await jobs.balance(renter)).toMatchObject({ available: '100.000000', locked: '0.000000' });
  });

  it('bounds all attempts together by the spend cap: the attempt it cannot pay is never started, the job says why', {
    timeout: 90_000,
  }, async () => {
    const region = newRegion();
    const [machine] = await machinesIn(region, 1);
    const [offer] = await offersIn(region);
    expect(offer?.provider_id).toBe(machine!.providerId);
    // Each attempt's workload fails at once, billed its first minute; the cap pays for two and a half minutes.
    const minute = Number(offer!.price_per_gpu_hour) / 60;
    const cap = (minute * 2.5).toFixed(6);
    const renter = await rig.renter();
    const res = await jobs.submit(renter, {
      region,
      spend_cap: cap,
      max_attempts: 10,
      retry_on_failure: true,
      workload: { command: ['sh', '-c', 'exit 1'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const done = await until(() => jobs.job(renter, res.json().id), ended, 60_000);
    expect(done.state, JSON.stringify(done)).toBe('failed');
    expect(done.attempts, JSON.stringify(done)).toHaveLength(2);
    for (const a of done.attempts) expect(Number(a.cost)).toBeCloseTo(minute, 6);
    expect(done.reason).toMatch(
      new RegExp(`^spend_cap: ${done.spent} of ${cap} spent; what is left pays for less than a first minute`),
    );
    // The wallet paid what the attempts cost, within the cap, and holds nothing.
    expect(Number(done.spent)).toBeCloseTo(costOf(done.attempts), 6);
    expect(Number(done.spent)).toBeLessThanOrEqual(Number(cap));
    const balance = await jobs.balance(renter);
    expect(balance.locked).toBe('0.000000');
    expect(Number(balance.available)).toBeCloseTo(100 - Number(done.spent), 6);
  });

  it('places a job on the cheapest of the machines that meet its terms', { timeout: 60_000 }, async () => {
    const region = newRegion();
    // The cheapest: 8 GPUs of less VRAM (priced by it). Dearer machines registered before and after it, so that a
    // placement by any order but price would not pick it.
    const [cheap] = await machinesIn(
      region,
      1,
      Array.from({ length: 8 }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 40_960 })),
    );
    const dear: RigMachine[] = [];
    while (
      dear.length < 8 &&
      !(dear.some((m) => m.providerId < cheap!.providerId) && dear.some((m) => m.providerId > cheap!.providerId))
    ) {
      dear.push(...(await machinesIn(region, 1)));
    }
    const offers = await offersIn(region);
    expect(offers).toHaveLength(dear.length + 1);
    expect(offers[0]!.provider_id).toBe(cheap!.providerId);
    expect(Number(offers[0]!.price_per_gpu_hour)).toBeLessThan(Number(offers[1]!.price_per_gpu_hour));
    const renter = await rig.renter();
    // Every one of them meets its terms (its price limit is above the dearest).
    const res = await jobs.submit(renter, {
      region,
      gpu_model: 'H100',
      max_price_per_gpu_hour: (Math.ceil(Number(offers.at(-1)!.price_per_gpu_hour) * 1e6) / 1e6).toFixed(6),
      workload: { command: ['sleep', '1'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const placed = await until(
      () => jobs.job(renter, res.json().id),
      (j) => j.attempts.length > 0,
      30_000,
    );
    expect(placed.attempts[0].provider_id).toBe(cheap!.providerId);
    const done = await until(() => jobs.job(renter, res.json().id), ended, 30_000);
    expect(done.state).toBe('succeeded');
  });

  it('places a queued job within seconds of capacity appearing, though its placer polls hourly', {
    timeout: 90_000,
  }, async () => {
    const region = newRegion();
    const [machine] = await machinesIn(region, 1);
    const renter = await rig.renter();
    const workload = { command: ['sleep', '1'], max_runtime_seconds: 60 };
    // The region's one machine goes off the market: a job for it waits.
    online.delete(machine!);
    expect(await machine!.daemon.leaveMarket(5_000)).toBe(true);
    expect(await offersIn(region)).toEqual([]);
    const res = await jobs.submit(renter, { region, workload });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().id;
    const waiting = await until(
      () => jobs.job(renter, id),
      (j) => j.state === 'queued' && j.reason !== 'waiting for a machine',
      30_000,
    );
    expect(waiting).toMatchObject({ state: 'queued', reason: 'no offer meets its terms now', attempts: [] });
    // The machine comes back (its next heartbeat): the registry's event wakes the placer.
    await machine!.daemon.heartbeat();
    online.add(machine!);
    const placed = await until(
      () => jobs.job(renter, id),
      (j) => j.attempts.length > 0,
      30_000,
    );
    expect(placed.attempts.map((a: JobJson) => a.provider_id)).toEqual([machine!.providerId]);
    expect((await until(() => jobs.job(renter, id), ended, 30_000)).state).toBe('succeeded');

    // Its GPUs all taken by a renter's own session: the next job waits, and is placed once that session frees them.
    const other = await rig.rent(machine!.providerId, 8, { command: ['sleep', '600'], max_runtime_seconds: 600 });
    const next = (await jobs.submit(renter, { region, workload })).json().id;
    const queued = await until(
      () => jobs.job(renter, next),
      (j) => j.state === 'queued' && j.reason !== 'waiting for a machine',
      30_000,
    );
    // (The market may not show the session's GPUs taken yet: the machine's refusal to start it then says so.)
    expect(queued).toMatchObject({ state: 'queued', attempts: [] });
    const freed = await rig.endSession(other.headers, other.id);
    expect(freed.statusCode, freed.body).toBe(200);
    const placedNext = await until(
      () => jobs.job(renter, next),
      (j) => j.attempts.length > 0,
      30_000,
    );
    expect(placedNext.attempts.map((a: JobJson) => a.provider_id)).toEqual([machine!.providerId]);
    expect((await until(() => jobs.job(renter, next), ended, 30_000)).state).toBe('succeeded');
  });

  // A checkpoint taken while the workload runs is taken inside its sandbox, which only a root daemon enters.
  it.skipIf(!isRoot)(
    'keeps the checkpoint the workload left when told to stop, and a broken upload never replaces the complete one',
    { timeout: 120_000 },
    async () => {
      const region = newRegion();
      await machinesIn(region, 1);
      const renter = await rig.renter();
      // Counts into its checkpoint (each step written whole, by rename); told to stop (SIGTERM), it writes that too.
      const count =
        'd=$GPU_PLATFORM_CHECKPOINT_DIR; ' +
        'trap \'echo stopped > "$d/state.tmp"; mv "$d/state.tmp" "$d/state"; exit 0\' TERM; ' +
        'n=0; while :; do n=$((n+1)); echo "$n" > "$d/n.tmp"; mv "$d/n.tmp" "$d/n"; sleep 0.1; done';
      const res = await jobs.submit(renter, {
        region,
        workload: { command: ['sh', '-c', count], max_runtime_seconds: 120, checkpoint: { interval_seconds: 5 } },
      });
      expect(res.statusCode, res.body).toBe(201);
      const id = res.json().id;
      const running = await until(
        () => jobs.job(renter, id),
        (j) => j.checkpoint !== null,
        40_000,
      );
      expect(running.state).toBe('running');
      const key = running.checkpoint.key;
      const session = running.attempts[0].session_id;
      // From now on every upload of the job's checkpoint breaks off halfway. Once one did, the job's checkpoint and
      // its object are the last complete ones (the daemon keeps one checkpoint after another).
      proxy.cut((path) => path.includes(`jobs/${id}/checkpoints/`));
      onTestFinished(() => proxy.cut(null));
      await until(
        async () => proxy.cuts.length,
        (n) => n > 0,
        30_000,
      );
      const complete = (await jobs.job(renter, id)).checkpoint;
      const before = await jobs.object(renter, key);
      expect(before.length).toBe(complete.size);
      const counted = Number(spawnSync('tar', ['-xOf', '-', './n'], { input: before }).stdout.toString());
      expect(counted).toBeGreaterThan(0);
      // Cancelled: the workload is told to stop and leaves its last word; the daemon uploads that final tar, which
      // breaks off too.
      const cancelled = await jobs.cancel(renter, id);
      expect(cancelled.state).toBe('cancelled');
      const finalCut = await until(
        async () => proxy.cuts.find((c) => c.body.includes('stopped\n')),
        (c) => c !== undefined,
        30_000,
      );
      expect(finalCut).toBeDefined();
      // Half of it reached the store, which kept the complete one; the job still names the complete one.
      expect(await jobs.object(renter, key)).toEqual(before);
      expect((await jobs.job(renter, id)).checkpoint).toEqual(complete);
      // The store takes uploads again: the daemon's next try keeps the final checkpoint, with the workload's last word.
      proxy.cut(null);
      const kept = await until(
        () => jobs.job(renter, id),
        (j) => j.checkpoint?.kept_at !== complete.kept_at,
        30_000,
      );
      expect(kept.checkpoint).toMatchObject({ key, session_id: session });
      const last = await jobs.object(renter, key);
      expect(last.length).toBe(kept.checkpoint.size);
      expect(spawnSync('tar', ['-xOf', '-', './state'], { input: last }).stdout.toString()).toBe('stopped\n');
      expect(Number(spawnSync('tar', ['-xOf', '-', './n'], { input: last }).stdout.toString())).toBeGreaterThan(
        counted,
      );
    },
  );

  it('holds nothing of the wallet once a running job is cancelled', { timeout: 60_000 }, async () => {
    const region = newRegion();
    await machinesIn(region, 1);
    const renter = await rig.renter();
    const res = await jobs.submit(renter, {
      region,
      workload: { command: ['sleep', '600'], max_runtime_seconds: 600 },
    });
    const id = res.json().id;
    await runningJob(renter, id);
    // Running, its session holds part of the wallet.
    expect(Number((await jobs.balance(renter)).locked)).toBeGreaterThan(0);
    const cancelled = await jobs.cancel(renter, id);
    expect(cancelled).toMatchObject({ state: 'cancelled', reason: 'cancelled by its renter' });
    expect(cancelled.attempts[0]).toMatchObject({ end_reason: 'job_cancelled' });
    expect(cancelled.spent).toBe(cancelled.attempts[0].cost);
    const balance = await jobs.balance(renter);
    expect(balance.locked).toBe('0.000000');
    expect(Number(balance.available)).toBeCloseTo(100 - Number(cancelled.spent), 6);
  });

  // The second attempt knows it is the second by the checkpoint the first kept while it ran (taken as root).
  it.skipIf(!isRoot)(
    'follows a job’s logs with gpu jobs logs -f across its attempts, the first’s then the second’s',
    { timeout: 120_000 },
    async () => {
      const billing = rig.billing.app.server.address();
      if (!billing || typeof billing === 'string') throw new Error('billing is not listening on a port');
      const gateway = await buildGateway({
        upstreams: {
          auth: rig.platform.authUrl,
          storage: rig.storage.url,
          'provider-registry': rig.platform.registryUrl,
          billing: `http://127.0.0.1:${billing.port}`,
        },
        logLevel: 'silent',
      });
      const configDir = mkdtempSync(join(tmpdir(), 'jobs-terms-gpu-'));
      onTestFinished(async () => {
        await gateway.close();
        rmSync(configDir, { recursive: true, force: true });
      });
      const gpu = gpuAt(await gateway.listen({ host: '127.0.0.1', port: 0 }), configDir);
      // A renter signed in with gpu, with a funded wallet.
      const { user, email, password, tokens } = await registerAndLogin(rig.platform.auth.app, { roles: ['renter'] });
      const login = await gpu(['login', '--email', email], { input: `${password}\n` });
      expect(login.code, login.stderr).toBe(0);
      const headers = { authorization: `Bearer ${tokens.access_token}` };
      const wallet = await rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/wallet',
        headers,
        payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
      });
      await rig.billing.credit(wallet.json().id, '100');
      const renter = { id: user.id, headers, walletId: wallet.json().id as string };

      const region = newRegion();
      const machines = await machinesIn(region, 2);
      const script =
        'd=$GPU_PLATFORM_CHECKPOINT_DIR; ' +
        'if [ -f "$d/seen" ]; then echo "again in $GPU_PLATFORM_SESSION_ID"; exit 0; fi; ' +
        'echo "first in $GPU_PLATFORM_SESSION_ID"; touch "$d/seen"; sleep 600';
      const res = await jobs.submit(renter, {
        region,
        max_attempts: 3,
        workload: { command: ['sh', '-c', script], max_runtime_seconds: 600, checkpoint: { interval_seconds: 5 } },
      });
      expect(res.statusCode, res.body).toBe(201);
      const id = res.json().id;
      const followed = gpu(['jobs', 'logs', id, '-f']);
      // Once the first attempt kept its checkpoint, its machine takes it back: the job goes on on the other one.
      const kept = await until(
        () => jobs.job(renter, id),
        (j) => j.checkpoint !== null,
        40_000,
      );
      const first = kept.attempts[0];
      await jobs.takeBack(machines, first);
      const result = await followed;
      const done = await jobs.job(renter, id);
      expect(done.state, JSON.stringify(done)).toBe('succeeded');
      expect(done.attempts).toHaveLength(2);
      const second = done.attempts[1];
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toBe(`first in ${first.session_id}\nagain in ${second.session_id}\n`);
      expect(result.stderr).toContain(`-- attempt 2 on machine ${second.provider_id} (session ${second.session_id})\n`);
      expect(result.stderr).toMatch(/job succeeded; spent \d+\.\d+\n$/);
    },
  );

  it('shows the job recovering, its lost attempt ended, from its machine going offline to its next placement', {
    timeout: 90_000,
  }, async () => {
    const region = newRegion();
    const [machine] = await machinesIn(region, 1);
    const renter = await rig.renter();
    const res = await jobs.submit(renter, {
      region,
      max_attempts: 3,
      workload: { command: ['sleep', '600'], max_runtime_seconds: 600 },
    });
    const id = res.json().id;
    const running = await runningJob(renter, id);
    // Its machine leaves the market: billing hears of it and ends the session; no other machine meets the terms.
    online.delete(machine!);
    expect(await machine!.daemon.leaveMarket(5_000)).toBe(true);
    // (Between its rounds: while one tries to place it, it is `placing`.)
    const recovering = await until(
      () => jobs.job(renter, id),
      // Its place in the queue is shown between the placer's rounds (a round holding it shows none).
      (j) => (j.state === 'recovering' && j.queue_position !== null) || ended(j),
      30_000,
    );
    expect(recovering, JSON.stringify(recovering)).toMatchObject({
      state: 'recovering',
      session_id: running.session_id,
    });
    expect(recovering.attempts).toHaveLength(1);
    expect(recovering.attempts[0]).toMatchObject({ provider_id: machine!.providerId, end_reason: 'provider_offline' });
    expect(recovering.attempts[0].ended_at).not.toBeNull();
    expect(recovering.queue_position).toBeGreaterThanOrEqual(1);
    expect(recovering.spent).toBe(recovering.attempts[0].cost);
    // Still recovering while no machine is there, holding nothing.
    const still = await until(
      () => jobs.job(renter, id),
      (j) => j.state === 'recovering' && j.reason === 'no offer meets its terms now',
      10_000,
    );
    expect(still.state).toBe('recovering');
    expect((await jobs.balance(renter)).locked).toBe('0.000000');
    // The machine comes back: the job is placed again, attempt 2.
    await machine!.daemon.heartbeat();
    online.add(machine!);
    const again = await runningJob(renter, id);
    expect(again.attempts).toHaveLength(2);
    expect(again.attempts[1]).toMatchObject({ n: 2, provider_id: machine!.providerId, ended_at: null });
    await jobs.cancel(renter, id);
  });
});
