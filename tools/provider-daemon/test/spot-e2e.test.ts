/**
 * Interruptible leases end to end, against the real auth service, registry, storage and billing (its own background
 * placing jobs and relaying to the registry), with the daemon's runner and the real sandbox on simulated 8-GPU
 * machines. Three renters hold a machine at bids (a job at 1 on two GPUs, a rental at 2 on two, one at 3 on four); an
 * on-demand rental of four takes the two lowest bids and spares the highest. The preempted workloads get their
 * notice and SIGTERM at once; the job writes its checkpoint in the grace and exits, and the checkpoint reaches the
 * renter's storage before the deadline; the rental that ignores SIGTERM runs to the deadline and is killed there, not
 * before; the winner runs once both are gone. The bills stop at the notice, the provider's earnings are exactly what
 * the sessions paid less the fee, and the job is placed again at its bid on another machine, where it goes on from
 * its checkpoint.
 */
import { spawnSync } from 'node:child_process';
import { createLogger } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registrySessionPublisher } from '../../../services/billing/src/adapters/registry-sessions.ts';
import { type Background, startBackground } from '../../../services/billing/src/background.ts';
import { Dec } from '../../../services/billing/src/domain/ledger/index.ts';
import { announcePrices } from '../../../services/billing/src/domain/pricing/index.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

const isRoot = process.getuid?.() === 0;
const GRACE_MS = 12_000;
const rig = useWorkloadRig({
  storage: true,
  billing: {
    billing: { preemption_grace: `${GRACE_MS}ms` },
    jobs: { place_interval: '1s', placing_timeout: '60s', retry_interval: '500ms' },
  },
});
let background: Background | undefined;

beforeAll(async () => {
  await rig.priceTheMarket();
  const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
  const publisher = registrySessionPublisher({ ...rig.billing.config.provider_registry, timeout: '2s' }, logger);
  background = await startBackground(rig.billing.ctx, rig.billing.config, publisher!, undefined, null);
}, 60_000);
afterAll(async () => {
  await background?.stop();
});

// biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
type Json = any;

/** A machine that takes bids from 0.5 per GPU-hour, its runner running, stated to the market. */
async function biddableMachine() {
  const m = await rig.machine();
  await rig.takeBids(m.providerId, '0.5');
  await announcePrices(rig.billing.ctx);
  const runner = m.runner();
  runner.run();
  return { ...m, runner };
}

/** A session's standard output as kept in its renter's storage, once `done` says it is all there. */
function storedLog(
  headers: Record<string, string>,
  sessionId: string,
  done: (log: string) => boolean,
): Promise<string> {
  const key = `sessions/${sessionId}/logs/stdout.log`;
  return until(
    async () => {
      const res = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(key)}`, { headers });
      return res.ok ? await res.text() : '';
    },
    done,
    30_000,
  );
}

describe('interruptible leases end to end', () => {
  // The job's checkpoint is restored into the sandbox, which only a root daemon enters.
  it.skipIf(!isRoot)(
    'takes four GPUs from the two lowest bids with notice: checkpoint kept in the grace, SIGKILL at the deadline, bills stopped at the notice, the job resumed elsewhere',
    { timeout: 180_000 },
    async () => {
      const a = await biddableMachine();
      const runners = [a.runner];
      try {
        const [jobRenter, second, third] = await Promise.all([rig.renter(), rig.renter(), rig.renter()]);
        const read = async (headers: Record<string, string>, url: string): Promise<Json> => {
          const res = await rig.billing.app.inject({ url, headers });
          expect(res.statusCode, res.body).toBe(200);
          return res.json();
        };
        // The job counts on from its checkpoint; it writes the checkpoint only when told to stop (in the grace), and
        // exits. From a checkpoint it counts 20 more and ends.
        const count =
          'd=$GPU_PLATFORM_CHECKPOINT_DIR; n=$(cat "$d/n" 2>/dev/null || echo 0); echo "from $n"; ' +
          'trap \'echo "$n" > "$d/n.tmp"; mv "$d/n.tmp" "$d/n"; echo "term at $n"; exit 143\' TERM; ' +
          'if [ "$n" -gt 0 ]; then end=$((n+20)); else end=100000000; fi; ' +
          'while [ "$n" -lt "$end" ]; do n=$((n+1)); sleep 0.05; done; echo "done at $n"';
        const submitted = await rig.billing.app.inject({
          method: 'POST',
          url: '/api/v1/billing/jobs',
          headers: jobRenter.headers,
          payload: {
            wallet_id: jobRenter.walletId,
            gpu_count: 2,
            gpu_model: 'H100',
            max_price_per_gpu_hour: '100',
            bid_per_gpu_hour: '1',
            spend_cap: '10',
            workload: {
              command: ['sh', '-c', count],
              max_runtime_seconds: 600,
              checkpoint: { interval_seconds: 3600 },
            },
          },
        });
        expect(submitted.statusCode, submitted.body).toBe(201);
        const jobId = submitted.json().id as string;
        const placed = await until(
          () => read(jobRenter.headers, `/api/v1/billing/jobs/${jobId}`),
          (j) => j.state === 'running',
          60_000,
        );
        const jobSession = placed.attempts[0].session_id as string;
        expect(placed.attempts[0].provider_id).toBe(a.providerId);

        // The two other renters fill the machine at bids of 2 (ignoring SIGTERM, ticking) and 3.
        const ticking = [
          'trap \'echo "term $(date +%s%3N)"; echo "notice $(cat "$GPU_PLATFORM_NOTICE_FILE")"\' TERM',
          'while true; do echo "tick $(date +%s%3N)"; sleep 0.2; done',
        ].join('\n');
        const atTwo = await rig.start(
          a.providerId,
          2,
          { command: ['bash', '-c', ticking], max_runtime_seconds: 600 },
          second,
          {
            bid: '2',
          },
        );
        const atThree = await rig.start(
          a.providerId,
          4,
          { command: ['sleep', '600'], max_runtime_seconds: 600 },
          third,
          {
            bid: '3',
          },
        );
        expect([atTwo.statusCode, atThree.statusCode], atTwo.body + atThree.body).toEqual([201, 201]);
        const twoId = atTwo.json().session.id as string;
        const threeId = atThree.json().session.id as string;
        for (const [headers, id] of [
          [jobRenter.headers, jobSession],
          [second.headers, twoId],
          [third.headers, threeId],
        ] as const) {
          await until(
            () => rig.workloadOf(headers, id),
            (w) => w.state === 'running',
            60_000,
          );
        }
        // Let the job count a while.
        await new Promise((r) => setTimeout(r, 1000));

        // On demand, four GPUs: the bids of 1 and 2 are taken (two GPUs each), the bid of 3 spared.
        const winner = await rig.rent(a.providerId, 4, { command: ['sleep', '600'], max_runtime_seconds: 600 });
        const [takenJob, takenTwo] = await Promise.all([
          rig.workloadOf(jobRenter.headers, jobSession),
          rig.workloadOf(second.headers, twoId),
        ]);
        for (const taken of [takenJob, takenTwo]) {
          expect(taken.session).toMatchObject({
            status: 'completed',
            end_reason: 'preempted',
            preempted_by: winner.id,
          });
          expect(taken.notice).toMatchObject({ reason: 'preempted' });
        }
        expect((await rig.workloadOf(third.headers, threeId)).session.status).toBe('active');
        expect([...takenJob.session.gpu_indices, ...takenTwo.session.gpu_indices].sort()).toEqual(
          [...winner.gpus].sort(),
        );
        const deadline = Date.parse(takenTwo.notice.deadline);
        expect(deadline - Date.parse(takenTwo.notice.at)).toBe(GRACE_MS);

        // The job wrote its checkpoint when told, and it reached storage before the deadline.
        const kept = await until(
          () => read(jobRenter.headers, `/api/v1/billing/jobs/${jobId}`),
          (j) => j.checkpoint?.session_id === jobSession,
          GRACE_MS + 10_000,
        );
        expect(Date.parse(kept.checkpoint.kept_at)).toBeLessThan(deadline);
        const tar = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(kept.checkpoint.key)}`, {
          headers: jobRenter.headers,
        });
        expect(tar.status).toBe(200);
        const saved = Number(
          spawnSync('tar', ['-xOf', '-', './n'], { input: Buffer.from(await tar.arrayBuffer()) }).stdout.toString(),
        );
        expect(saved).toBeGreaterThan(0);

        // The rental that ignored SIGTERM saw the notice at once, ran through its grace and was killed at the
        // deadline, not before.
        await until(
          () => rig.workloadOf(second.headers, twoId),
          (w) => w.state === 'stopped',
          GRACE_MS + 30_000,
        );
        const ticksOf = (log: string) => [...log.matchAll(/^tick (\d+)$/gm)].map((t) => Number(t[1]));
        // Its logs are uploaded as it runs: the last upload, once it has ended, holds its last ticks.
        const out = await storedLog(second.headers, twoId, (log) => Math.max(...ticksOf(log)) > deadline - 3000);
        const term = Number(/^term (\d+)$/m.exec(out)?.[1]);
        const ticks = ticksOf(out);
        expect(JSON.parse(/^notice (.*)$/m.exec(out)?.[1] ?? 'null')).toEqual(takenTwo.notice);
        expect(term).toBeLessThan(deadline - GRACE_MS / 2);
        expect(Math.max(...ticks)).toBeGreaterThan(deadline - 3000);
        // Killed at the deadline: a few seconds' slack for a busy machine's timers, well short of another grace.
        expect(Math.max(...ticks)).toBeLessThan(deadline + GRACE_MS / 2);
        // The winner runs once both are gone (and holds its GPUs: the job cannot come back here at its bid).
        const won = await until(
          () => rig.workloadOf(winner.headers, winner.id),
          (w) => w.state === 'running',
          60_000,
        );
        expect(Date.parse(won.running_at)).toBeGreaterThanOrEqual(deadline);

        // The bills stopped at the notice: each taken session ended when the winner's lease began, billed its one
        // started minute at its bid.
        const records = await rig.billing.db
          .selectFrom('billing_records')
          .selectAll()
          .where('session_id', 'in', [jobSession, twoId])
          .execute();
        for (const r of records) {
          expect(new Date(r.ended_at).getTime()).toBe(Date.parse(winner.startedAt));
          expect(r.billed_minutes).toBe(1);
        }
        const costOf = (id: string) => records.find((r) => r.session_id === id)!.total_cost;
        expect(new Dec(costOf(jobSession)).toFixed(6)).toBe('0.033333');
        expect(new Dec(costOf(twoId)).toFixed(6)).toBe('0.066667');

        // The job is placed again at its bid, on a machine it can win, and goes on from its checkpoint.
        const b = await biddableMachine();
        runners.push(b.runner);
        const done = await until(
          () => read(jobRenter.headers, `/api/v1/billing/jobs/${jobId}`),
          (j) => ['succeeded', 'failed', 'cancelled'].includes(j.state),
          90_000,
        );
        expect(done, JSON.stringify(done)).toMatchObject({ state: 'succeeded' });
        expect(done.attempts.map((x: Json) => [x.provider_id, x.end_reason])).toEqual([
          [a.providerId, 'preempted'],
          [b.providerId, 'workload_exited'],
        ]);
        const log = await storedLog(jobRenter.headers, done.attempts[1].session_id, (l) => l.includes('done at'));
        expect(log).toBe(`from ${saved}\ndone at ${saved + 20}\n`);

        // The provider's earnings on the first machine are exactly what its ended sessions paid, less the fee.
        for (const [headers, id] of [
          [third.headers, threeId],
          [winner.headers, winner.id],
        ] as const) {
          const ended = await rig.billing.app.inject({
            method: 'POST',
            url: '/api/v1/billing/end-session',
            headers,
            payload: { session_id: id },
          });
          expect(ended.statusCode, ended.body).toBe(200);
        }
        const all = await rig.billing.db
          .selectFrom('billing_records')
          .selectAll()
          .where('provider_id', '=', a.providerId)
          .execute();
        expect(all).toHaveLength(4);
        const earned = all.reduce((sum, r) => sum.plus(r.provider_earnings), new Dec(0));
        for (const r of all) expect(new Dec(r.provider_earnings).plus(r.platform_fee).eq(r.total_cost)).toBe(true);
        const wallet = await rig.billing.app.inject({
          url: `/api/v1/provider/${a.providerId}/earnings`,
          headers: { authorization: `Bearer ${await (await rig.platform.machineClient('service')).get()}` },
        });
        expect(wallet.statusCode, wallet.body).toBe(200);
        expect(new Dec(wallet.json().total_earned).eq(earned)).toBe(true);
        expect((await rig.billing.assertLedgerConsistent()).problems).toEqual([]);
      } finally {
        await Promise.all(runners.map((r) => r.stop()));
      }
    },
  );
});
