/**
 * `pnpm bench workloads`: how long a renter waits for their workload, and how long a stopped one lingers, in sandbox
 * mode (bubblewrap) and in container mode (Podman, the test setup's busybox image, when the machine has them) on a
 * simulated 8-GPU machine, with the daemon's defaults (`workloads.poll_interval` 1 s, `stop_grace` 10 s). For each of `BENCH_RUNS` (20) rentals: the time from `POST /billing/start-session` (answered)
 * to billing showing the workload `running`, and from `POST /billing/end-session` (answered) to billing showing it
 * `stopped` (`session_ended`), which the daemon reports once no process of the workload is left. The workload is
 * `sleep 3600`, which ends at SIGTERM (in the container the image is already on the machine: no pull). Billing is the real service on the test PostgreSQL, listening on loopback;
 * the daemon's runner polls it over HTTP with a daemon token. Target: under 2 s each (issue #38). Writes the
 * `workloads` section of docs/benchmarks.md (only prints it with BENCH_ONLY set).
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { createLogger, Outbox } from '@gpu/common';
import { createTestDatabase, startTestIssuer } from '@gpu/common/testing';
import { billingContext, buildApp } from '../../../services/billing/src/app.ts';
import { billingConfigSchema } from '../../../services/billing/src/config.ts';
import { openBillingDatabase } from '../../../services/billing/src/db/open.ts';
import { postTransfers } from '../../../services/billing/src/domain/ledger/ledger.ts';
import { Dec } from '../../../services/billing/src/domain/ledger/money.ts';
import { createWallet } from '../../../services/billing/src/domain/wallets/wallets.ts';
import { daemonConfigSchema } from '../src/config.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { UsageReporter } from '../src/usage.ts';
import { WorkloadRunner } from '../src/workloads/runner.ts';
import { containerSettings, testImage } from '../test/support/containers.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 20);
const TARGET_MS = 2000;
const logger = createLogger({ service: 'workloads-bench', instanceId: 'b', level: 'silent' });

const testDb = await createTestDatabase('workloads_bench');
const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
const config = billingConfigSchema.parse({
  log_level: 'silent',
  access: issuer.accessConfig,
  database: { url: testDb.url, pool_size: 10 },
  blockchain: { token_decimals: 6, commitment: 'finalized' },
});
const database = await openBillingDatabase(config);
const db = database.db;
const deps = { config, logger, db, chain: null, outbox: new Outbox() };
const app = await buildApp(deps, billingContext(deps));
const billingUrl = await app.listen({ host: '127.0.0.1', port: 0 });

const owner = await issuer.user(['provider']);
const daemon = await issuer.client('daemon', owner.id);
const renter = await issuer.user(['renter']);
const wallet = (ownerType: 'user' | 'provider', who: { ownerId?: string; holderId?: string }) =>
  createWallet(db, {
    ownerType,
    ownerId: who.ownerId ?? randomUUID(),
    solanaAddress: randomUUID().replace(/-/g, '').slice(0, 32),
    ...(who.holderId ? { holderId: who.holderId } : {}),
  });
const renterWallet = await wallet('user', { ownerId: renter.id });
const provider = await wallet('provider', { holderId: owner.id });
await db.transaction().execute((trx) =>
  postTransfers(trx, [
    {
      debit: { system: 'chain_incoming' },
      credit: { wallet: renterWallet.id, kind: 'available' },
      amount: new Dec('100000'),
      code: 'bench_credit',
    },
  ]),
);

// Container mode where the test setup made it possible (scripts/test-env.sh exports the image only where Podman runs
// containers here; the tests then fail saying why, the benchmark measures the sandbox alone).
const containerImage = process.env.TEST_CONTAINER_IMAGE ? testImage : undefined;
const runRoot = mkdtempSync(join(tmpdir(), 'workloads-bench-'));
chmodSync(runRoot, 0o711);
const daemonConfig = daemonConfigSchema.parse({
  billing_url: billingUrl,
  gpu: {
    source: 'simulated',
    simulated_gpus: Array.from({ length: 8 }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 })),
  },
  workloads: {
    run_dir: join(runRoot, 'run'),
    ...(containerImage ? containerSettings : {}),
  },
});
const token = { get: async () => daemon.token };
const usage = new UsageReporter({ config: daemonConfig, logger, token, publisher: { enabled: false } as never });
const runner = new WorkloadRunner({
  config: daemonConfig,
  logger,
  token,
  gpus: gpuSource(daemonConfig.gpu),
  providerId: () => provider.ownerId,
  sessions: (id) => usage.runningSessions(id),
});
runner.run();

const call = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${billingUrl}${path}`, {
    method,
    headers: { ...renter.headers, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return (await res.json()) as Record<string, unknown> & { session?: { id: string } };
};
async function until(id: string, state: string): Promise<number> {
  for (;;) {
    const w = await call('GET', `/api/v1/billing/sessions/${id}/workload`);
    if (w.state === state) return performance.now();
    if (typeof w.state === 'string' && ['exited', 'failed', 'stopped'].includes(w.state) && w.state !== state) {
      throw new Error(`workload of ${id} ended ${w.state} (${String(w.reason)}), not ${state}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Rents and ends `RUNS` sessions running `workload`, one after another: the two waits of each. */
async function measure(workload: object): Promise<{ toRunning: number[]; toGone: number[] }> {
  const toRunning: number[] = [];
  const toGone: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const started = await call('POST', '/api/v1/billing/start-session', {
      user_id: renter.id,
      wallet_id: renterWallet.id,
      provider_id: provider.ownerId,
      job_id: randomUUID(),
      gpu_model: 'NVIDIA H100',
      gpu_count: 2,
      requested_vram_mb: 0,
      estimated_power_w: 0,
      accepted_hourly_rate: '100000',
      workload,
    });
    const asked = performance.now();
    const id = started.session?.id;
    if (!id) throw new Error(`start-session failed: ${JSON.stringify(started)}`);
    toRunning.push((await until(id, 'running')) - asked);
    const ending = performance.now();
    await call('POST', '/api/v1/billing/end-session', { session_id: id });
    toGone.push((await until(id, 'stopped')) - ending);
  }
  return { toRunning, toGone };
}
const sandbox = await measure({ command: ['sleep', '3600'], max_runtime_seconds: 3600 });
const container = containerImage
  ? await measure({ image: containerImage, command: ['/bin/busybox', 'sleep', '3600'], max_runtime_seconds: 3600 })
  : null;
await runner.stop();
await app.close();
await database.close();
await testDb.drop();
await issuer.close();
rmSync(runRoot, { recursive: true, force: true });

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { median: at(0.5), p95: at(0.95), max: s.at(-1)! };
};
const row = (what: string, xs: number[]) => {
  const { median, p95, max } = stats(xs);
  const ok = p95 < TARGET_MS ? 'yes' : 'no';
  return `| ${what} | ${Math.round(median)} | ${Math.round(p95)} | ${Math.round(max)} | ${ok} |`;
};
writeBenchSection(
  'workloads',
  `## Workloads (sandbox and container modes)

${machineLine()}

${RUNS} rentals of 2 of 8 simulated GPUs per mode, one after another, each running \`sleep 3600\` in the bubblewrap
sandbox, then in a Podman container (its image on the machine);
the daemon's defaults (poll every 1 s, 10 s grace); billing on the test PostgreSQL over loopback HTTP. Milliseconds,
from billing's answer to the state billing shows (what a renter polling it sees):

| interval | median | p95 | max | p95 under ${TARGET_MS} ms |
|---|---|---|---|---|
${row('sandbox: start-session answered -> workload running', sandbox.toRunning)}
${row('sandbox: end-session answered -> workload stopped, no process left', sandbox.toGone)}
${
  container
    ? `${row('container: start-session answered -> workload running', container.toRunning)}
${row('container: end-session answered -> workload stopped and removed', container.toGone)}`
    : '| container mode | not measured: no Podman here | | | |'
}

Each is the poll interval plus what the mode takes: the daemon learns of a start or an end at its next poll (here
each request comes just after one, the worst case; at random moments half a poll on average). Starting the sandbox
and stopping it (\`sleep\` ends at SIGTERM; the PID namespace ends with it) take tens of milliseconds; a container
(create, init, start, and \`rm --force\` at its end) a few hundred. With NATS (\`nats_url\`) billing nudges the
machine's subject at a start or an end and the daemon polls at once, taking the poll's wait out;
\`workloads.poll_interval\` shortens it meanwhile.`,
);
process.exit(0);
