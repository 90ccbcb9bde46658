/**
 * The daemon runs the renter's workload against the real auth service, registry and billing, in the real bubblewrap
 * sandbox on a simulated 8-GPU machine: a session of 2 GPUs with a workload runs it on exactly those GPUs, is billed
 * from when it ran, and ends when it exits; a session ended first has its workload stopped and gone; a daemon that
 * died with its workload reports it lost when it comes back, and nothing after is billed.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { connectPublisher, createLogger, type NatsPublisher, OutboxRelay } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { diskShareMb } from '../src/workloads/disk.ts';
import { running as isRunning } from '../src/workloads/processes.ts';
import { WorkloadRunner } from '../src/workloads/runner.ts';
import { containerSettings as containers, testImage as image } from './support/containers.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

const rig = useWorkloadRig();
const isRoot = process.getuid?.() === 0;
const machine = (workloads?: Record<string, unknown>) => rig.machine(workloads);
const rent = (providerId: string, gpuCount: number, workload: object) => rig.rent(providerId, gpuCount, workload);
const workloadOf = (headers: Record<string, string>, id: string) => rig.workloadOf(headers, id);

/**
 * The workload a restarted daemon found it had lost: stopped at its earlier life's last sign of life (no later), the
 * session ended as the machine's fault, billed to then.
 */
async function expectLost(r: { headers: Record<string, string>; id: string }, lastSync: number) {
  const lost = await until(
    () => workloadOf(r.headers, r.id),
    (w) => w.state === 'stopped',
  );
  expect(lost).toMatchObject({ state: 'stopped', reason: 'daemon_restarted' });
  expect(Date.parse(lost.ended_at)).toBeLessThanOrEqual(lastSync);
  expect(lost.session).toMatchObject({ status: 'completed', end_reason: 'workload_lost', billed_minutes: 1 });
}

const labelled = () =>
  spawnSync('podman', [...containers.container_runtime_args, 'ps', '--all', '--format', '{{.Names}}'], {
    encoding: 'utf8',
  }).stdout.split('\n');

describe("the daemon runs renters' workloads", () => {
  it('runs one on exactly its leased GPUs, billed from when it ran, and ends the session when it exits', async () => {
    const m = await machine();
    await rent(m.providerId, 4, { command: ['sleep', '30'], max_runtime_seconds: 60 }); // GPUs 0-3 taken
    const r = await rent(m.providerId, 2, {
      command: ['sh', '-c', 'ls /dev | grep nvidia; echo "$CUDA_VISIBLE_DEVICES"; sleep 1; exit 7'],
      max_runtime_seconds: 60,
    });
    expect(r.gpus).toEqual([4, 5]);
    const runner = m.runner();
    runner.run();
    try {
      const running = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state !== 'pending' && w.state !== 'preparing',
      );
      expect(['running', 'exited']).toContain(running.state);
      const ended = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'exited',
      );
      const stderr = () => readFileSync(join(m.runDir, r.id, 'logs', 'stderr.log'), 'utf8');
      expect(ended, stderr()).toMatchObject({ state: 'exited', exit_code: 7 });
      expect(ended.session).toMatchObject({ status: 'completed', end_reason: 'workload_exited', billed_minutes: 1 });
      expect(ended.session.billed_from).toBe(ended.running_at);
      const out = readFileSync(join(m.runDir, r.id, 'logs', 'stdout.log'), 'utf8');
      expect(out).toBe('nvidia4\nnvidia5\nGPU-simulated-4,GPU-simulated-5\n');
      // Its work directory goes with it (once billing took the end).
      const workDir = join(m.runDir, r.id, 'work');
      expect(
        await until(
          async () => existsSync(workDir),
          (there) => !there,
        ),
      ).toBe(false);
    } finally {
      await runner.stop();
    }
  });

  it('stops a workload whose session ended first, within a poll and the grace period, and reports it', async () => {
    const m = await machine();
    const r = await rent(m.providerId, 1, {
      command: ['bash', '-c', 'trap "" TERM; sleep 3600 & wait'],
      max_runtime_seconds: 3600,
    });
    const runner = m.runner();
    runner.run();
    try {
      await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'running',
      );
      const end = await rig.endSession(r.headers, r.id);
      expect(end.statusCode).toBe(200);
      const stopped = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'stopped',
      );
      // One poll (200 ms) and the grace period (500 ms) after the session's end: it ignored SIGTERM and was killed.
      // Timed by the records (the session's end, the workload's), not by this test's polls; the bound leaves a busy
      // machine room, and stays short of the default grace (10 s).
      expect(Date.parse(stopped.ended_at!) - Date.parse(end.json().session.ended_at)).toBeLessThan(8000);
      expect(stopped).toMatchObject({ state: 'stopped', reason: 'session_ended' });
      expect(stopped.session.end_reason).toBe(end.json().session.end_reason);
    } finally {
      await runner.stop();
    }
  });

  it("starts the next renter's workload on a GPU only once the previous one there is gone", async () => {
    const m = await machine({ stop_grace: '2s' });
    // It ignores SIGTERM: it holds its GPU through the whole grace period.
    const first = await rent(m.providerId, 1, {
      command: ['bash', '-c', 'trap "" TERM; sleep 3600 & wait'],
      max_runtime_seconds: 3600,
    });
    const runner = m.runner();
    runner.run();
    try {
      await until(
        () => workloadOf(first.headers, first.id),
        (w) => w.state === 'running',
      );
      const end = await rig.endSession(first.headers, first.id);
      expect(end.statusCode).toBe(200);
      // Billing freed the GPU at once: the next renter gets it while the first workload is still stopping.
      const next = await rent(m.providerId, 1, { command: ['true'], max_runtime_seconds: 60 });
      expect(next.gpus).toEqual(first.gpus);
      const done = await until(
        () => workloadOf(next.headers, next.id),
        (w) => w.state === 'exited',
      );
      const gone = await workloadOf(first.headers, first.id);
      expect(gone).toMatchObject({ state: 'stopped', reason: 'session_ended' });
      expect(Date.parse(done.running_at)).toBeGreaterThanOrEqual(Date.parse(gone.ended_at));
    } finally {
      await runner.stop();
    }
  });

  it('a daemon that came back kills the sandbox its earlier life left, reports the workload lost, and bills nothing after its last sign of life', async () => {
    const m = await machine();
    const r = await rent(m.providerId, 1, { command: ['sleep', '3600'], max_runtime_seconds: 3600 });
    // The first life: once it is dead, nothing it would say reaches billing.
    let dead = false;
    const first = new WorkloadRunner({
      ...m.deps,
      token: { get: () => (dead ? Promise.reject(new Error('this daemon is dead')) : m.deps.token.get()) },
    });
    await first.sync();
    const running = await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'running',
    );
    expect(running.state).toBe('running');
    // Its next poll: alive, with the workload running.
    await first.sync();
    // The daemon dies. Its sandboxes die with it (--die-with-parent) as far as their first processes' parent-death
    // signal holds; here the runner is dropped without a word to billing and its sandbox runs on, as one whose signal
    // did not hold would.
    const lastSync = Date.now();
    dead = true;
    const init = first.entryOf(r.id)?.process()?.pid ?? null;
    expect(init).not.toBeNull();
    const second = m.runner();
    // The next life kills it at its start: its journal noted the sandbox's first process.
    await until(
      async () => isRunning(init!),
      (alive) => !alive,
      10_000,
    );
    await second.sync();
    await expectLost(r, lastSync);
    await first.stop();
    await second.stop();
  });

  it('a machine whose disk holds less than workloads.disk_mb states what it holds, and gives each workload that much, reserved whole', async () => {
    // Far more than this machine's disk holds for a workload on each of its 8 GPUs.
    const d = await rig.daemonProcess({ disk_mb: 2_147_483_647 });
    try {
      const service = await rig.platform.machineClient('service');
      const record = await rig.platform.registry.app.inject({
        url: `/providers/${d.providerId}`,
        headers: { authorization: `Bearer ${await service.get()}` },
      });
      const stated = record.json().disk_mb as number;
      // A third of each GPU's share of the disk under its run directory, less what the daemon keeps and the inode table
      // (others write meanwhile).
      const holds = diskShareMb(d.runDir, 8, 1_000_000);
      expect(stated).toBeLessThan(2_147_483_647);
      expect(Math.abs(stated - holds)).toBeLessThanOrEqual(Math.max(512, holds / 10));
      const r = await rent(d.providerId, 1, {
        command: ['sh', '-c', 'df -k /work | tail -n 1; exec sleep 600'],
        max_runtime_seconds: 600,
      });
      const stdout = join(d.runDir, r.id, 'logs', 'stdout.log');
      const line = await until(
        async () => (existsSync(stdout) ? readFileSync(stdout, 'utf8') : ''),
        (out) => out.includes('\n'),
        60_000,
      );
      const sizeKb = Number(line.trim().split(/\s+/)[1]);
      if (isRoot) {
        // Its own filesystem of the stated size (less the filesystem's own records), whose blocks the machine's disk
        // holds for it already: nothing else filling that disk can fail its writes.
        expect(sizeKb).toBeGreaterThan(stated * 1024 * 0.9);
        expect(sizeKb).toBeLessThanOrEqual(stated * 1024);
        const image = statSync(join(d.runDir, r.id, 'disk.img'));
        expect(image.blocks * 512).toBeGreaterThanOrEqual(stated * 1024 * 1024);
      }
      const ended = await rig.endSession(r.headers, r.id);
      expect(ended.statusCode, ended.body).toBe(200);
      // Its reservation goes with it.
      expect(
        await until(
          async () => existsSync(join(d.runDir, r.id, 'disk.img')),
          (there) => !there,
          60_000,
        ),
      ).toBe(false);
    } finally {
      d.child.kill('SIGTERM');
      await d.exited;
    }
  });

  it('reports a workload failed when the machine cannot run a sandbox: the session ends unbilled, its fault', async () => {
    const m = await machine({ bwrap_path: join(rig.dir, 'no-bwrap-here') });
    const r = await rent(m.providerId, 1, { command: ['true'], max_runtime_seconds: 60 });
    await m.runner().sync();
    const failed = await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'failed',
    );
    expect(failed).toMatchObject({ state: 'failed', reason: 'sandbox_unavailable' });
    expect(failed.session).toMatchObject({
      status: 'completed',
      end_reason: 'workload_not_started',
      billed_minutes: 0,
    });
  });

  it('never starts (nor bills) a program that is not there: failed, command_not_found, the session ends unbilled', async () => {
    const m = await machine();
    const r = await rent(m.providerId, 1, { command: ['no-such-program', '--epochs', '3'], max_runtime_seconds: 60 });
    await m.runner().sync();
    const failed = await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'failed',
    );
    expect(failed).toMatchObject({ state: 'failed', reason: 'command_not_found', running_at: null });
    expect(failed.session).toMatchObject({ status: 'completed', end_reason: 'workload_failed', billed_minutes: 0 });
    expect(failed.session.total_cost).toMatch(/^0(\.0+)?$/);
  });

  it('stops a workload past its paid time while billing cannot be reached, and reports it once billing answers', async () => {
    const m = await machine();
    const r = await rent(m.providerId, 1, { command: ['sleep', '3600'], max_runtime_seconds: 3600 });
    let offset = 0;
    let partitioned = false;
    const runner = new WorkloadRunner({
      ...m.deps,
      now: () => Date.now() + offset,
      sessions: (id) => (partitioned ? Promise.reject(new Error('billing unreachable')) : m.deps.sessions(id)),
    });
    await runner.sync();
    const running = await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'running',
    );
    // Billing says how long the session is paid for: its hold at its rate, from when it ran.
    expect(Date.parse(running.paid_until)).toBeGreaterThan(Date.parse(running.running_at));
    // Billing answers: nothing stops the workload, however late it is by the daemon's clock.
    offset = Date.parse(running.paid_until) - Date.now() + 1000;
    await runner.sync();
    runner.stopUnpaid();
    expect((await workloadOf(r.headers, r.id)).state).toBe('running');
    // Billing goes away for three polls and the paid time is over: the workload is stopped.
    partitioned = true;
    offset += 1000;
    await runner.sync().catch(() => {});
    runner.stopUnpaid();
    const stopped = await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'stopped',
    );
    expect(stopped).toMatchObject({ state: 'stopped', reason: 'paid_time_over' });
    expect(stopped.session, JSON.stringify(stopped)).toMatchObject({
      status: 'completed',
      end_reason: 'workload_stopped',
    });
    await runner.stop();
  });

  it('runs an image in a container on exactly its leased GPUs, billed from when it ran, ending with its exit code', async () => {
    const m = await machine(containers);
    const r = await rent(m.providerId, 2, {
      image,
      command: ['/bin/busybox', 'sh', '-c', 'ls /dev | grep nvidia; echo "$CUDA_VISIBLE_DEVICES"; sleep 1; exit 5'],
      max_runtime_seconds: 60,
    });
    const runner = m.runner();
    runner.run();
    try {
      const ended = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'exited' || w.state === 'failed',
      );
      expect(ended).toMatchObject({ state: 'exited', exit_code: 5 });
      expect(ended.session).toMatchObject({ status: 'completed', end_reason: 'workload_exited', billed_minutes: 1 });
      expect(ended.session.billed_from).toBe(ended.running_at);
      const out = readFileSync(join(m.runDir, r.id, 'logs', 'stdout.log'), 'utf8');
      expect(out).toBe(
        `${r.gpus.map((g: number) => `nvidia${g}`).join('\n')}\n${r.gpus.map((g: number) => `GPU-simulated-${g}`).join(',')}\n`,
      );
    } finally {
      await runner.stop();
    }
  });

  it('a daemon that came back removes the container its earlier life left, and reports the workload lost', async () => {
    const m = await machine(containers);
    const r = await rent(m.providerId, 1, {
      image,
      command: ['/bin/busybox', 'sleep', '3600'],
      max_runtime_seconds: 3600,
    });
    // The first life: once it is dead, nothing it would say reaches billing.
    let dead = false;
    const first = new WorkloadRunner({
      ...m.deps,
      token: { get: () => (dead ? Promise.reject(new Error('this daemon is dead')) : m.deps.token.get()) },
    });
    await first.sync();
    await until(
      () => workloadOf(r.headers, r.id),
      (w) => w.state === 'running',
    );
    await first.sync();
    const lastSync = Date.now();
    // The daemon dies; its container runs on (the runtime keeps it), labelled with the session.
    dead = true;
    expect(labelled()).toContain(`gpu-session-${r.id}`);
    const second = m.runner();
    await second.sync();
    expect(labelled()).not.toContain(`gpu-session-${r.id}`);
    await expectLost(r, lastSync);
    await first.stop();
    await second.stop();
  });

  it('an image on a machine without a container runtime, or one it cannot pull, fails unbilled', async () => {
    const bare = await machine();
    const r1 = await rent(bare.providerId, 1, { image, max_runtime_seconds: 60 });
    await bare.runner().sync();
    const noRuntime = await until(
      () => workloadOf(r1.headers, r1.id),
      (w) => w.state === 'failed',
    );
    expect(noRuntime).toMatchObject({ state: 'failed', reason: 'container_runtime_unavailable' });
    expect(noRuntime.session).toMatchObject({ end_reason: 'workload_not_started', billed_minutes: 0 });
    const m = await machine(containers);
    // A registry nothing answers at (the machine's own, allowed here): the pull fails at once.
    const r2 = await rent(m.providerId, 1, { image: 'localhost/nothing/here:1', max_runtime_seconds: 60 });
    // A registry by address the machine does not allow (its own network's): refused, never pulled.
    const r3 = await rent(m.providerId, 1, { image: '10.0.0.5:5000/probe:1', max_runtime_seconds: 60 });
    const runner = m.runner();
    await runner.sync();
    const failed = (r: { headers: Record<string, string>; id: string }) =>
      until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'failed',
        30_000,
      );
    const unpulled = await failed(r2);
    expect(unpulled).toMatchObject({ state: 'failed', reason: 'image_unavailable' });
    // Not the machine's fault: the renter's image (or its registry).
    expect(unpulled.session).toMatchObject({ end_reason: 'workload_failed', billed_minutes: 0 });
    const refused = await failed(r3);
    expect(refused).toMatchObject({ state: 'failed', reason: 'image_refused' });
    expect(refused.session).toMatchObject({ end_reason: 'workload_failed', billed_minutes: 0 });
    await runner.stop();
  });

  it("starts and stops a workload at once on its machine's NATS subject, with a poll far too slow to", async () => {
    const m = await machine({ poll_interval: '60s' });
    const logger = createLogger({ service: 'relay-test', instanceId: 't', level: 'silent' });
    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'daemon-test',
    })) as NatsPublisher;
    // Billing's outbox relay, as its background runs it: events out on `billing.events.<kind>`.
    const relay = new OutboxRelay(rig.billing.db, publisher, { subject: 'billing.events', logger });
    relay.start(50);
    const { promise: listening, resolve: subscribed } = Promise.withResolvers<void>();
    const runner = new WorkloadRunner({
      ...m.deps,
      nudges: (subject, onMessage) => {
        const sub = publisher.connection.subscribe(subject, { callback: () => onMessage() });
        subscribed();
        return sub;
      },
    });
    // Its first poll finds nothing, subscribes to the machine's subject, and would look again in a minute.
    runner.run();
    try {
      // Rented once it listens (a fixed pause could end first on a busy machine, and the nudge go unheard).
      await listening;
      const r = await rent(m.providerId, 1, { command: ['sleep', '3600'], max_runtime_seconds: 3600 });
      const asked = Date.now();
      // Well within the minute its next poll would take, with room for a busy machine: the nudge woke it.
      const running = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'running',
        30_000,
      );
      expect(running.state).toBe('running');
      expect(Date.now() - asked).toBeLessThan(30_000);
      const end = await rig.endSession(r.headers, r.id);
      expect(end.statusCode).toBe(200);
      const ended = Date.now();
      const stopped = await until(
        () => workloadOf(r.headers, r.id),
        (w) => w.state === 'stopped',
        30_000,
      );
      expect(stopped).toMatchObject({ state: 'stopped', reason: 'session_ended' });
      expect(Date.now() - ended).toBeLessThan(30_000);
    } finally {
      await runner.stop();
      await relay.stop();
      await publisher.close();
    }
  });
});
