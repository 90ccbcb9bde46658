/**
 * A job survives the death of its machine: against the real auth service, registry (its offline sweep on, a machine
 * silent for 10 s offline: a live daemon whose beats a busy host slows is not taken for dead), storage and billing
 * (its own background placing jobs and asking the registry about the machines with running sessions), the first
 * machine's daemon runs as a process of its own and is killed with SIGKILL mid-job: its workload dies with it (the
 * sandbox's `--die-with-parent`), its heartbeats stop, the registry takes it for offline, billing ends its session
 * `provider_offline`, and the job is placed on the second machine, which restores the checkpoint the first one kept
 * while it ran: the count goes on from there, not from 0. The renter pays both attempts and nothing else: no hold is
 * left.
 */
import { spawnSync } from 'node:child_process';
import { NoopPublisher } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Background, startBackground } from '../../../services/billing/src/background.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

const isRoot = process.getuid?.() === 0;
const rig = useWorkloadRig({
  storage: true,
  registry: {
    config: { heartbeat_interval: '1s', offline_after: '10s', offline_sweep_interval: '500ms' },
    sweeper: true,
  },
  billing: {
    jobs: { place_interval: '1s', placing_timeout: '60s', retry_interval: '500ms' },
    billing: { provider_check_interval: '500ms' },
  },
});
let background: Background | undefined;

beforeAll(async () => {
  await rig.priceTheMarket();
  background = await startBackground(rig.billing.ctx, rig.billing.config, new NoopPublisher(), undefined, null);
}, 60_000);
afterAll(async () => {
  await background?.stop();
});

// biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
type Json = any;

describe('a job whose machine dies', () => {
  // A checkpoint is taken inside the running sandbox, which only a root daemon enters.
  it.skipIf(!isRoot)(
    'goes on on another machine from the last checkpoint after its daemon is killed with SIGKILL, paying both attempts only',
    { timeout: 180_000 },
    async () => {
      const first = await rig.daemonProcess();
      const renter = await rig.renter();
      const read = async (url: string): Promise<Json> => {
        const res = await rig.billing.app.inject({ url, headers: renter.headers });
        expect(res.statusCode, res.body).toBe(200);
        return res.json();
      };
      // Counts on from what its checkpoint holds, each step written whole (by rename), and says where it began:
      // from nothing it counts for good (until its machine dies), from a checkpoint 40 steps more, then ends.
      const count =
        'd=$GPU_PLATFORM_CHECKPOINT_DIR; n=$(cat "$d/n" 2>/dev/null || echo 0); echo "from $n"; ' +
        'if [ "$n" -gt 0 ]; then end=$((n+40)); else end=100000000; fi; ' +
        'while [ "$n" -lt "$end" ]; do n=$((n+1)); echo "$n" > "$d/n.tmp"; mv "$d/n.tmp" "$d/n"; sleep 0.05; done; ' +
        'echo "done at $n"';
      const submitted = await rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/jobs',
        headers: renter.headers,
        payload: {
          wallet_id: renter.walletId,
          gpu_count: 1,
          max_price_per_gpu_hour: '100',
          spend_cap: '10',
          workload: {
            command: ['sh', '-c', count],
            max_runtime_seconds: 600,
            checkpoint: { interval_seconds: 5 },
          },
        },
      });
      expect(submitted.statusCode, submitted.body).toBe(201);
      const id = submitted.json().id;
      // The only machine takes it, and keeps a checkpoint while it runs.
      const kept = await until(
        () => read(`/api/v1/billing/jobs/${id}`),
        (j) => j.checkpoint !== null,
        60_000,
      );
      expect(kept.state).toBe('running');
      expect(kept.attempts[0].provider_id).toBe(first.providerId);
      const second = rig.machine();
      const machine = await second;
      const runner = machine.runner();
      runner.run();
      const beat = setInterval(() => machine.daemon.heartbeat().catch(() => {}), 1000);
      try {
        first.child.kill('SIGKILL');
        await first.exited;
        const tar = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(kept.checkpoint.key)}`, {
          headers: renter.headers,
        });
        expect(tar.status).toBe(200);
        const saved = Number(
          spawnSync('tar', ['-xOf', '-', './n'], { input: Buffer.from(await tar.arrayBuffer()) }).stdout.toString(),
        );
        expect(saved).toBeGreaterThan(0);
        const done = await until(
          () => read(`/api/v1/billing/jobs/${id}`),
          (j) => ['succeeded', 'failed', 'cancelled'].includes(j.state),
          120_000,
        );
        expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded' });
        expect(done.attempts).toHaveLength(2);
        expect(done.attempts[0]).toMatchObject({ provider_id: first.providerId, end_reason: 'provider_offline' });
        expect(done.attempts[1]).toMatchObject({ provider_id: machine.providerId, end_reason: 'workload_exited' });
        // The second attempt began where a checkpoint of the first left off, and counted to the end from there.
        const log = await until(
          async () => {
            const res = await fetch(
              `${rig.storage.url}/objects/${encodeURIComponent(`sessions/${done.attempts[1].session_id}/logs/stdout.log`)}`,
              { headers: renter.headers },
            );
            return res.ok ? await res.text() : '';
          },
          (text) => text.includes('done at'),
          30_000,
        );
        const from = Number(/^from (\d+)\n/.exec(log)?.[1]);
        expect(from).toBeGreaterThanOrEqual(saved);
        expect(log.endsWith(`done at ${from + 40}\n`)).toBe(true);
        // Both attempts paid, each once, and nothing held after.
        const costs = done.attempts.map((a: Json) => a.cost);
        expect(Number(done.spent)).toBeCloseTo(Number(costs[0]) + Number(costs[1]), 6);
        const balance = await read(`/api/v1/wallet/${renter.walletId}/balance`);
        expect(balance.locked).toBe('0.000000');
        expect(Number(balance.available)).toBeCloseTo(100 - Number(done.spent), 6);
      } finally {
        clearInterval(beat);
        await runner.stop();
      }
    },
  );
});
