/**
 * Jobs against the real auth service, registry, billing and daemons running workloads in the sandbox: billing's
 * placer finds a job a machine from the registry's offers, starts its session, follows it to its end, and places it
 * again on another machine when its machine fails it. Billing's own background runs the placer, with an interval of
 * an hour: every placement and settlement here is woken (a job submitted, a workload's end reported, a session
 * ended), as they are on a platform between its rounds.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { NoopPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Background, startBackground } from '../../../services/billing/src/background.ts';
import { addAttempt, sessionJobId } from '../../../services/billing/src/db/job-repository.ts';
import type { BillingDB } from '../../../services/billing/src/db/schema.ts';
import { followJobs, nextQueueDeadline, placeJobs } from '../../../services/billing/src/domain/jobs/index.ts';
import { Dec } from '../../../services/billing/src/domain/ledger/index.ts';
import { startWorkloadSession } from '../../../services/billing/src/domain/workloads/index.ts';
import { ended, type JobJson, jobsOn, type RigMachine } from './support/jobs.ts';
import { type Renter, until, useWorkloadRig } from './support/workload-rig.ts';

const JOBS = { place_interval: '1h', placing_timeout: '60s', retry_interval: '200ms', final_checkpoint_wait: '60s' };
const rig = useWorkloadRig({ storage: true, billing: { jobs: JOBS } });
const isRoot = process.getuid?.() === 0;
let machines: RigMachine[] = [];
const runners: { run(): void; stop(): Promise<void> }[] = [];
let background: Background | undefined;
let heartbeats: NodeJS.Timeout | undefined;

beforeAll(async () => {
  await rig.priceTheMarket();
  machines = [await rig.machine(), await rig.machine()];
  for (const m of machines) {
    const runner = m.runner();
    runner.run();
    runners.push(runner);
  }
  // The machines stay online (and offered) however long the file runs.
  heartbeats = setInterval(() => {
    for (const m of machines) m.daemon.heartbeat().catch(() => {});
  }, 5_000);
  background = await startBackground(rig.billing.ctx, rig.billing.config, new NoopPublisher(), undefined, null);
}, 60_000);

afterAll(async () => {
  clearInterval(heartbeats);
  await background?.stop();
  await Promise.all(runners.map((r) => r.stop()));
});

const jobs = jobsOn(rig);
const { submit, job, object } = jobs;

/** The machine of an attempt takes its session back (its own daemon ends it: the provider's fault); the machine. */
const takeBack = (attempt: { provider_id: string; session_id: string }) => jobs.takeBack(machines, attempt);

/** The workload of the job's latest attempt, as its renter reads it (none before the first). */
async function runningWorkload(renter: Renter, id: string): Promise<JobJson> {
  const j = await job(renter, id);
  return j.session_id ? rig.workloadOf(renter.headers, j.session_id) : null;
}

/**
 * Plays a placer that wrote the job's attempt on the first machine and started its session, then died before saying
 * the job runs: the job `placing` until `leaseEndsAt`. The session's ID.
 */
async function deadPlacerStarts(
  renter: Renter & { walletId: string },
  id: string,
  command: string[],
  leaseEndsAt: Date,
) {
  const sessionId = randomUUID();
  await rig.billing.db.transaction().execute(async (trx) => {
    await trx.updateTable('jobs').set({ state: 'placing', placing_until: leaseEndsAt }).where('id', '=', id).execute();
    await addAttempt(trx, {
      job_id: id,
      session_id: sessionId,
      provider_id: machines[0]!.providerId,
      started_at: new Date(),
    });
  });
  await startWorkloadSession(
    rig.billing.ctx,
    {
      actor: UNCHECKED_PRINCIPAL,
      userId: renter.id,
      walletId: renter.walletId,
      providerId: machines[0]!.providerId,
      jobId: sessionJobId(id),
      sessionId,
      gpuModel: 'H100',
      gpuCount: 1,
      requestedVramMb: 0,
      estimatedPowerW: 0,
      acceptedHourlyRate: '100',
      spendCap: new Dec('5'),
      workload: { command, max_runtime_seconds: 60, env: {}, inputs: [], network: false },
    },
    null,
  );
  return sessionId;
}

describe('jobs', () => {
  it('places a job on a machine that meets its terms, runs it and ends succeeded, billed for its attempt', {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    const res = await submit(renter, {
      name: 'hello',
      gpu_count: 2,
      gpu_model: 'H100',
      workload: { command: ['sh', '-c', 'echo "on $CUDA_VISIBLE_DEVICES"; sleep 1'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const submitted = res.json();
    expect(submitted).toMatchObject({ state: 'queued', name: 'hello', attempts: [], spent: '0.000000' });
    const done = await until(() => job(renter, submitted.id), ended, 40_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded', reason: null });
    expect(done.attempts).toHaveLength(1);
    const [a] = done.attempts;
    expect(machines.map((m) => m.providerId)).toContain(a.provider_id);
    expect(a).toMatchObject({ n: 1, end_reason: 'workload_exited' });
    expect(done.spent).toBe(a.cost);
    // The attempt is a session of the renter's, on 2 GPUs, whose workload printed its GPUs.
    const session = await rig.billing.app.inject({
      url: `/api/v1/billing/sessions/${a.session_id}/workload`,
      headers: renter.headers,
    });
    expect(session.json()).toMatchObject({ state: 'exited', exit_code: 0 });
    // Listed among the renter's jobs, and nobody else's.
    const mine = await rig.billing.app.inject({ url: '/api/v1/billing/jobs', headers: renter.headers });
    expect(mine.json().map((j: JobJson) => j.id)).toEqual([submitted.id]);
    const other = await rig.renter();
    expect(
      (await rig.billing.app.inject({ url: `/api/v1/billing/jobs/${submitted.id}`, headers: other.headers })).json(),
    ).toMatchObject({ status: 404, code: 'JOB_NOT_FOUND' });
    const cancel = await rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/jobs/${submitted.id}/cancel`,
      headers: other.headers,
    });
    expect(cancel.statusCode).toBe(404);
  });

  it('fails a job whose workload exits non-zero, and answers a submit sent again with its key with the same job', {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    const key = randomUUID();
    const body = { workload: { command: ['sh', '-c', 'exit 3'], max_runtime_seconds: 60 } };
    const first = await submit(renter, body, key);
    const again = await submit(renter, body, key);
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json().id).toBe(first.json().id);
    // The same key with another body is not taken for the job it made (a cap of 50 answered as the cap of 5).
    const other = await submit(renter, { ...body, spend_cap: '50' }, key);
    expect(other.statusCode, other.body).toBe(409);
    expect(other.json().code).toBe('IDEMPOTENCY_KEY_REUSED');
    const done = await until(() => job(renter, first.json().id), ended, 40_000);
    expect(done).toMatchObject({ state: 'failed', reason: 'workload_exited: the workload exited with 3' });
    expect(done.attempts).toHaveLength(1);
  });

  it('keeps a job no offer fits queued with why and its place, holding nothing; cancelling ends it', {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    const res = await submit(renter, {
      max_price_per_gpu_hour: '0.000001',
      workload: { command: ['true'], max_runtime_seconds: 60 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().id;
    const waiting = await until(
      () => job(renter, id),
      (j) => j.reason !== 'waiting for a machine',
      30_000,
    );
    expect(waiting).toMatchObject({ state: 'queued', reason: 'no offer meets its terms now' });
    expect(waiting.queue_position).toBeGreaterThanOrEqual(1);
    const balance = await rig.billing.app.inject({
      url: `/api/v1/wallet/${renter.walletId}/balance`,
      headers: renter.headers,
    });
    expect(balance.json()).toMatchObject({ available: '100.000000', locked: '0.000000' });
    // A wait for a final checkpoint that ended unanswered is no deadline of the placer's: it was woken every 100 ms.
    await rig.billing.ctx.db
      .updateTable('jobs')
      .set({ state: 'recovering', final_checkpoint_until: new Date(Date.now() - 60_000) })
      .where('id', '=', id)
      .execute();
    const deadline = await nextQueueDeadline(rig.billing.ctx);
    expect(deadline === null || deadline.getTime() > Date.now(), String(deadline)).toBe(true);
    const cancelled = await rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/jobs/${id}/cancel`,
      headers: renter.headers,
    });
    expect(cancelled.json()).toMatchObject({ state: 'cancelled', reason: 'cancelled by its renter', attempts: [] });
  });

  it("keeps checkpoints for jobs only: a session of the renter's own naming one is refused, and reports none", async () => {
    const renter = await rig.renter();
    const start = (workload: Record<string, unknown>) =>
      rig.start(machines[0]!.providerId, 1, { command: ['true'], max_runtime_seconds: 60, ...workload }, renter);
    const refused = await start({ checkpoint: { interval_seconds: 60 } });
    expect(refused.statusCode, refused.body).toBe(400);
    expect(refused.json().errors[0].path).toBe('body.workload.checkpoint');
    const tooOften = await submit(renter, {
      workload: { command: ['true'], max_runtime_seconds: 60, checkpoint: { interval_seconds: 1 } },
    });
    expect(tooOften.statusCode).toBe(400);
    expect(tooOften.json().errors[0].path).toBe('body.workload.checkpoint.interval_seconds');
    const plain = await start({});
    expect(plain.statusCode, plain.body).toBe(201);
    const session = plain.json().session.id;
    const said = await rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/sessions/${session}/workload/checkpoint`,
      headers: { authorization: `Bearer ${await machines[0]!.deps.token.get()}` },
      payload: { size: 10 },
    });
    expect(said.statusCode, said.body).toBe(409);
    expect(said.json().code).toBe('NO_CHECKPOINT');
  });

  it('refuses terms no registered machine could meet, naming what is missing, unless asked to wait', async () => {
    const renter = await rig.renter();
    const workload = { command: ['true'], max_runtime_seconds: 60 };
    const nine = await submit(renter, { gpu_count: 9, gpu_model: 'H100', workload });
    expect(nine.statusCode, nine.body).toBe(409);
    expect(nine.json()).toMatchObject({
      code: 'NO_MACHINE_COULD_MEET',
      detail: 'no registered machine has 9 H100 GPUs: ask for less, or set wait_for_capacity',
    });
    const model = await submit(renter, { gpu_model: 'B200', workload });
    expect(model.json()).toMatchObject({
      code: 'NO_MACHINE_COULD_MEET',
      detail: 'no registered machine has a GPU of model B200: ask for less, or set wait_for_capacity',
    });
    // Matched as the placer matches it (the model's key), not as a part of a name: `H10` would never be placed.
    const part = await submit(renter, { gpu_model: 'H10', workload });
    expect(part.json()).toMatchObject({ code: 'NO_MACHINE_COULD_MEET', gpu_model: 'H10' });
    const vram = await submit(renter, { min_vram_mb: 200_000, workload });
    expect(vram.json().detail).toBe(
      'no registered machine has 1 GPUs with at least 200000 MB each: ask for less, or set wait_for_capacity',
    );
    // Nothing was queued for them.
    const list = await rig.billing.app.inject({ url: '/api/v1/billing/jobs', headers: renter.headers });
    expect(list.json()).toEqual([]);
    const waiting = await submit(renter, { gpu_count: 9, wait_for_capacity: true, workload });
    expect(waiting.statusCode, waiting.body).toBe(201);
    expect(waiting.json()).toMatchObject({ state: 'queued' });
    await rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/jobs/${waiting.json().id}/cancel`,
      headers: renter.headers,
    });
  });

  it('places a job again on the other machine when its machine takes the session back, billing both attempts', {
    timeout: 90_000,
  }, async () => {
    const renter = await rig.renter();
    const res = await submit(renter, {
      max_attempts: 3,
      // Every attempt writes the same outputs and logs (one prefix for the job).
      workload: { command: ['sh', '-c', 'sleep 4'], max_runtime_seconds: 60, output: { prefix: 'results/' } },
    });
    const id = res.json().id;
    const running = await until(
      () => job(renter, id),
      (j) => j.state === 'running',
      30_000,
    );
    const first = running.attempts[0];
    // The machine's own daemon ends the session under the job: the provider's fault.
    const owner = await takeBack(first);
    const done = await until(() => job(renter, id), ended, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded' });
    expect(done.attempts).toHaveLength(2);
    expect(done.attempts[0]).toMatchObject({ end_reason: 'provider_ended' });
    expect(done.attempts[1].provider_id).not.toBe(first.provider_id);
    const costs = done.attempts.map((a: JobJson) => Number(a.cost));
    expect(Number(done.spent)).toBeCloseTo(costs[0] + costs[1], 6);
    // The first machine, within its upload window still, writes none of the job's outputs or logs: the second's.
    const headers = { authorization: `Bearer ${await owner.deps.token.get()}` };
    const files = `/api/v1/billing/sessions/${first.session_id}/workload`;
    for (const [url, payload] of [
      [`${files}/grants`, { outputs: ['result.txt'] }],
      [`${files}/outputs`, { files: [{ path: 'result.txt', size: 5 }] }],
    ] as const) {
      const refused = await rig.billing.app.inject({ method: 'POST', url, headers, payload });
      expect(refused.statusCode, refused.body).toBe(409);
      expect(refused.json()).toMatchObject({ code: 'ATTEMPT_SUPERSEDED' });
    }
  });

  it.skipIf(!isRoot)(
    'recovers a job on the other machine from the checkpoint its first machine kept while it ran',
    { timeout: 90_000 },
    async () => {
      const renter = await rig.renter();
      // A counter that goes on from what its checkpoint directory holds, writing each step whole (by rename).
      const count =
        'd=$GPU_PLATFORM_CHECKPOINT_DIR; n=$(cat "$d/n" 2>/dev/null || echo 0); echo "from $n"; ' +
        'while [ "$n" -lt 100000 ]; do n=$((n+1)); echo "$n" > "$d/n.tmp"; mv "$d/n.tmp" "$d/n"; sleep 0.05; done';
      const res = await submit(renter, {
        max_attempts: 3,
        workload: { command: ['sh', '-c', count], max_runtime_seconds: 120, checkpoint: { interval_seconds: 5 } },
      });
      expect(res.statusCode, res.body).toBe(201);
      const id = res.json().id;
      const kept = await until(
        () => job(renter, id),
        (j) => j.checkpoint !== null,
        40_000,
      );
      const first = kept.attempts[0];
      expect(kept.checkpoint).toMatchObject({
        key: `jobs/${id}/checkpoints/${first.session_id}.tar`,
        session_id: first.session_id,
      });
      // The renter's storage holds it: a tar of the directory, its counter past 0.
      const tar = await object(renter, kept.checkpoint.key);
      expect(tar.length).toBe(kept.checkpoint.size);
      const saved = Number(spawnSync('tar', ['-xOf', '-', './n'], { input: tar }).stdout.toString());
      expect(saved).toBeGreaterThan(0);
      // Only the session's own machine says what it kept: not another machine's daemon, nor the renter.
      const other = machines.find((m) => m.providerId !== first.provider_id)!;
      for (const headers of [{ authorization: `Bearer ${await other.deps.token.get()}` }, renter.headers]) {
        const forged = await rig.billing.app.inject({
          method: 'POST',
          url: `/api/v1/billing/sessions/${first.session_id}/workload/checkpoint`,
          headers,
          payload: { size: 1 },
        });
        expect(forged.statusCode, forged.body).toBe(403);
      }
      // The machine's own daemon takes the session back: the job goes on elsewhere, from its checkpoint.
      const owner = await takeBack(first);
      const second = await until(
        () => job(renter, id),
        (j) => j.attempts.length === 2 && j.state === 'running',
        30_000,
      );
      expect(second.attempts[1].provider_id).not.toBe(first.provider_id);
      const log = await until(
        async () => {
          const res = await fetch(
            `${rig.storage.url}/objects/${encodeURIComponent(`sessions/${second.session_id}/logs/stdout.log`)}`,
            { headers: renter.headers },
          );
          return res.ok ? await res.text() : '';
        },
        (text) => text.startsWith('from '),
        30_000,
      );
      expect(Number(log.split('\n')[0]!.slice('from '.length))).toBeGreaterThanOrEqual(saved);
      // Once the second attempt kept its own, the first machine saying it kept one changes nothing: the job never
      // goes back to older work.
      const later = await until(
        () => job(renter, id),
        (j) => j.checkpoint?.session_id === second.session_id,
        30_000,
      );
      expect(later.checkpoint.key).toBe(`jobs/${id}/checkpoints/${second.session_id}.tar`);
      const late = await rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/sessions/${first.session_id}/workload/checkpoint`,
        headers: { authorization: `Bearer ${await owner.deps.token.get()}` },
        payload: { size: 1 },
      });
      expect(late.statusCode, late.body).toBe(204);
      expect((await job(renter, id)).checkpoint).toEqual(later.checkpoint);
      await rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/jobs/${id}/cancel`,
        headers: renter.headers,
      });
    },
  );

  it("places a job again when its machine's daemon stops under it (the workload lost with it)", {
    timeout: 90_000,
  }, async () => {
    const renter = await rig.renter();
    const res = await submit(renter, {
      workload: { command: ['sh', '-c', 'echo start; sleep 4; echo end'], max_runtime_seconds: 60 },
    });
    const id = res.json().id;
    const running = await until(
      async () => ({ job: await job(renter, id), w: await runningWorkload(renter, id) }),
      (v) => v.w?.state === 'running',
      30_000,
    );
    const first = running.job.attempts[0];
    const index = machines.findIndex((m) => m.providerId === first.provider_id);
    // Its daemon stops (as on a crash it would restart without the workload): the machine's fault.
    await runners[index]!.stop();
    const again = machines[index]!.runner();
    again.run();
    runners[index] = again;
    const done = await until(() => job(renter, id), ended, 60_000);
    expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded' });
    expect(done.attempts).toHaveLength(2);
    expect(done.attempts[0]).toMatchObject({ provider_id: first.provider_id, end_reason: 'workload_lost' });
    expect(done.attempts[1].provider_id).not.toBe(first.provider_id);
  });

  it('takes over a session a placer started before it died, and a cancel ends it, keeping its cost', {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    // Nothing places it (no offer is that cheap): then a placer that died mid-way is played out by hand.
    const res = await submit(renter, {
      max_price_per_gpu_hour: '0.000001',
      workload: { command: ['sleep', '30'], max_runtime_seconds: 60 },
    });
    const id = res.json().id;
    await until(
      () => job(renter, id),
      (j) => j.reason !== 'waiting for a machine',
      30_000,
    );
    const sessionId = await deadPlacerStarts(renter, id, ['sleep', '30'], new Date(Date.now() - 1000));
    await followJobs(rig.billing.ctx, JOBS);
    const adopted = await job(renter, id);
    expect(adopted).toMatchObject({ state: 'running', session_id: sessionId });
    expect(adopted.attempts).toHaveLength(1);
    // A renter's own session can never pass for a job's.
    const named = await rig.billing.app.inject({
      method: 'POST',
      url: '/api/v1/billing/start-session',
      headers: renter.headers,
      payload: {
        wallet_id: renter.walletId,
        provider_id: machines[1]!.providerId,
        job_id: sessionJobId(id),
        gpu_model: 'H100',
        gpu_count: 1,
        accepted_hourly_rate: '100',
      },
    });
    expect(named.statusCode).toBe(400);
    expect(named.json().errors[0].path).toBe('body.job_id');
    const cancelled = await rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/jobs/${id}/cancel`,
      headers: renter.headers,
    });
    const after = cancelled.json();
    expect(after).toMatchObject({ state: 'cancelled' });
    expect(after.attempts[0]).toMatchObject({ session_id: sessionId, end_reason: 'job_cancelled' });
    expect(after.attempts[0].cost).not.toBeNull();
    expect(after.spent).toBe(after.attempts[0].cost);
    const session = await rig.billing.app.inject({
      url: `/api/v1/billing/sessions/${sessionId}/workload`,
      headers: renter.headers,
    });
    expect(session.json().session.status).not.toBe('active');
  });

  it('decides a job by the session a dead placer started, once it ended unfollowed: never run, nor paid, again', {
    timeout: 120_000,
  }, async () => {
    const cases: [string[], string][] = [
      [['true'], 'succeeded'],
      [['sh', '-c', 'exit 3'], 'failed'],
    ];
    for (const [command, outcome] of cases) {
      const renter = await rig.renter();
      const res = await submit(renter, {
        max_price_per_gpu_hour: '0.000001',
        workload: { command, max_runtime_seconds: 60 },
      });
      const id = res.json().id;
      await until(
        () => job(renter, id),
        (j) => j.reason !== 'waiting for a machine',
        30_000,
      );
      // Its placer wrote the attempt and started the session, then died before saying the job runs: the job stays
      // `placing` while that placer's lease lasts, and the session ends within it.
      const sessionId = await deadPlacerStarts(renter, id, command, new Date(Date.now() + 60_000));
      await until(
        () => rig.workloadOf(renter.headers, sessionId),
        (w) => w.session.status !== 'active',
        60_000,
      );
      // Whichever comes first, the follower or a placer claiming the job once the lease is over, the session's end
      // decides the job: succeeded or failed as its workload ended, with that one attempt, paid once.
      await followJobs(rig.billing.ctx, JOBS);
      await rig.billing.db
        .updateTable('jobs')
        .set({ placing_until: new Date(Date.now() - 1000) })
        .where('id', '=', id)
        .execute();
      await placeJobs(rig.billing.ctx, JOBS);
      const after = await until(() => job(renter, id), ended, 20_000);
      expect(after.state, after.reason).toBe(outcome);
      expect(after.attempts).toHaveLength(1);
      expect(after.attempts[0]).toMatchObject({ session_id: sessionId });
      expect(after.spent).toBe(after.attempts[0].cost);
    }
  });

  it('starts no session for a job cancelled between its attempt and its start', { timeout: 30_000 }, async () => {
    const renter = await rig.renter();
    const directory = rig.billing.ctx.providers!;
    const provider = directory.provider;
    let cancelled: Promise<unknown> | undefined;
    // The start reads the machine's record after the placer wrote the attempt: the renter cancels right then.
    directory.provider = async (id, correlationId) => {
      while (!jobId) await new Promise((r) => setTimeout(r, 10));
      cancelled ??= rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/jobs/${jobId}/cancel`,
        headers: renter.headers,
      });
      await cancelled;
      return provider(id, correlationId);
    };
    let jobId = '';
    try {
      const res = await submit(renter, { workload: { command: ['true'], max_runtime_seconds: 60 } });
      jobId = res.json().id;
      // The cancel commits before the placer's start goes on to drop its attempt: wait for both.
      const done = await until(
        () => job(renter, jobId),
        (j) => ended(j) && j.attempts.length === 0,
        20_000,
      );
      expect(done).toMatchObject({ state: 'cancelled', attempts: [] });
    } finally {
      directory.provider = provider;
    }
    const sessions = await rig.billing.db
      .selectFrom('rental_sessions')
      .select('id')
      .where('job_id', '=', sessionJobId(jobId))
      .execute();
    expect(sessions).toEqual([]);
  });

  it("runs a job on the session whose start committed though the placer lost the start's answer", {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    const db = rig.billing.ctx.db as Kysely<BillingDB> & { transaction: Kysely<BillingDB>['transaction'] };
    const transaction = db.transaction.bind(db);
    let lost: string | undefined;
    // The connection is cut as the COMMIT of the job's session start is answered: committed, and the placer sees an
    // error. Every other transaction goes on as it would.
    db.transaction = () => {
      const builder = transaction();
      const execute = builder.execute.bind(builder);
      builder.execute = async <T>(fn: (trx: Transaction<BillingDB>) => Promise<T>): Promise<T> => {
        const result = await execute(fn);
        // The renter's (a renter of this test alone) job session: whatever the placer is at when the submit answers.
        const session = (result as { session?: { id: string; user_id: string; job_id: string } } | undefined)?.session;
        if (!lost && session?.user_id === renter.id && session.job_id.startsWith('job:')) {
          lost = session.id;
          throw new Error('Connection terminated unexpectedly');
        }
        return result;
      };
      return builder;
    };
    try {
      const res = await submit(renter, { workload: { command: ['sleep', '1'], max_runtime_seconds: 60 } });
      const jobId = res.json().id;
      const done = await until(() => job(renter, jobId), ended, 40_000);
      // The attempt the placer wrote is that session's, kept, and the job ran on it: not placed again, nor stuck.
      expect(lost).toBeDefined();
      expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded', session_id: lost });
      expect(done.attempts).toHaveLength(1);
      expect(done.attempts[0]).toMatchObject({ session_id: lost, end_reason: 'workload_exited' });
      expect(done.spent).toBe(done.attempts[0].cost);
    } finally {
      delete (db as { transaction?: unknown }).transaction;
    }
  });

  it("two placers at once (and the background's) place each of 50 jobs once", { timeout: 180_000 }, async () => {
    const round = async () => {
      await followJobs(rig.billing.ctx, JOBS);
      await placeJobs(rig.billing.ctx, JOBS);
    };
    const renter = await rig.renter();
    const ids: string[] = [];
    for (let i = 0; i < 50; i++) {
      const res = await submit(renter, {
        spend_cap: '1',
        workload: { command: ['sleep', '1'], max_runtime_seconds: 60 },
      });
      ids.push(res.json().id);
    }
    const racing = async () => {
      const deadline = Date.now() + 150_000;
      while (Date.now() < deadline) {
        await round();
        const open = (await Promise.all(ids.map((id) => job(renter, id)))).filter((j) => !ended(j));
        if (open.length === 0) return;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    await Promise.all([racing(), racing()]);
    const jobs = await Promise.all(ids.map((id) => job(renter, id)));
    expect(jobs.map((j) => j.state)).toEqual(ids.map(() => 'succeeded'));
    expect(jobs.map((j) => j.attempts.length)).toEqual(ids.map(() => 1));
    const sessions = await rig.billing.db
      .selectFrom('rental_sessions')
      .select(['job_id'])
      .where('job_id', 'in', ids.map(sessionJobId))
      .execute();
    expect(sessions).toHaveLength(50);
  });
});
