/**
 * `pnpm bench spot`: how soon a preempted interruptible workload hears of it, and how soon the rental that took its
 * GPUs runs. bench/platform.ts's platform: auth and the registry in this process, billing as its own process, a
 * provider daemon as its own process (as root: workloads in the real bubblewrap sandbox), its poll at the default
 * 1 s, `billing.preemption_grace` of `BENCH_GRACE_S` (10) seconds.
 *
 * `BENCH_RUNS` (5) times: a renter's bid of 1 per GPU-hour holds all 8 GPUs of the machine (its workload traps SIGTERM,
 * notes the time and the notice file, and runs on: the worst case, killed at the end of the grace); then an on-demand
 * rental of the 8 starts. From the on-demand start's answer:
 *   1. to SIGTERM inside the preempted workload (the time its trap noted; target under 2 s);
 *   2. to the on-demand rental's workload running (billing's `running_at`; target under the grace + 2 s).
 * Between runs the on-demand rental ends and its workload is gone.
 *
 * Writes the `spot` section of docs/benchmarks.md (only prints it with BENCH_ONLY set).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { type BenchRenter, post, startPlatform, until } from './platform.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const GRACE_S = Number(process.env.BENCH_GRACE_S ?? 10);
const TARGET_TERM_MS = 2000;
const TARGET_RUNNING_MS = GRACE_S * 1000 + 2000;

const platform = await startPlatform('spot_bench', { billing: { billing: { preemption_grace: `${GRACE_S}s` } } });
const { billingUrl } = platform;
const machine = await platform.machine();
const floor = await fetch(`${billingUrl}/api/v1/provider/${machine.providerId}/rates`, {
  method: 'PUT',
  headers: { 'content-type': 'application/json', ...(await platform.serviceHeaders()) },
  body: JSON.stringify({ bid_floor: '0.5' }),
});
if (!floor.ok) throw new Error(`setting the bid floor: ${floor.status} ${await floor.text()}`);
const bidder = await platform.renter();
const taker = await platform.renter();

// biome-ignore lint/suspicious/noExplicitAny: the bench reads JSON answers as the service wrote them
type Json = any;

const start = (who: BenchRenter, command: string[], bid?: string): Promise<Json> =>
  post(
    `${billingUrl}/api/v1/billing/start-session`,
    {
      user_id: who.userId,
      wallet_id: who.walletId,
      provider_id: machine.providerId,
      gpu_model: 'H100',
      gpu_count: 8,
      accepted_hourly_rate: '10000',
      ...(bid ? { bid } : {}),
      workload: { command, max_runtime_seconds: 3600 },
    },
    who.headers,
  );

async function workload(who: BenchRenter, id: string): Promise<Json> {
  const res = await fetch(`${billingUrl}/api/v1/billing/sessions/${id}/workload`, { headers: who.headers });
  if (!res.ok) throw new Error(`GET workload ${id}: ${res.status} ${await res.text()}`);
  return res.json();
}

const inState = (who: BenchRenter, id: string, states: string[]) =>
  until(
    () => `session ${id}'s workload never reached ${states.join(' or ')}:\n${machine.daemon.output()}`,
    async () => {
      const w = await workload(who, id);
      return states.includes(w.state) ? w : undefined;
    },
    120_000,
    20,
  );

/** The preempted workload's standard output, on the machine (a workload without storage keeps its logs there). */
function stdoutOf(sessionId: string): string {
  for (const run of readdirSync(platform.dir).filter((d) => d.startsWith('run-'))) {
    try {
      return readFileSync(join(platform.dir, run, sessionId, 'logs', 'stdout.log'), 'utf8');
    } catch {}
  }
  return '';
}

const trap = [
  'trap \'echo "term $(date +%s%3N)"; cat "$GPU_PLATFORM_NOTICE_FILE"; echo\' TERM',
  'while true; do sleep 0.1; done',
].join('\n');
const toTerm: number[] = [];
const toRunning: number[] = [];
let notice = '';
for (let i = 0; i < RUNS; i++) {
  const bid = (await start(bidder, ['bash', '-c', trap], '1')).session.id as string;
  await inState(bidder, bid, ['running']);
  const won = await start(taker, ['sleep', '3600']);
  const answered = Date.now();
  const wonId = won.session.id as string;
  const term = await until(
    () => `no SIGTERM in the preempted workload:\n${stdoutOf(bid)}`,
    async () => {
      const at = /^term (\d+)$/m.exec(stdoutOf(bid))?.[1];
      return at === undefined ? undefined : Number(at);
    },
    60_000,
    10,
  );
  notice ||=
    stdoutOf(bid)
      .split('\n')
      .find((l) => l.startsWith('{')) ?? '';
  const running = await inState(taker, wonId, ['running']);
  toTerm.push(term - answered);
  toRunning.push(Date.parse(running.running_at) - answered);
  process.stderr.write(`run ${i + 1}: SIGTERM +${term - answered} ms, winner running +${toRunning.at(-1)} ms\n`);
  await post(`${billingUrl}/api/v1/billing/end-session`, { session_id: wonId }, taker.headers);
  await inState(taker, wonId, ['stopped', 'exited', 'failed']);
}
await platform.close();

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)]!, max: s.at(-1)! };
};
const row = (what: string, xs: number[], target: number) => {
  const { median, max } = stats(xs);
  return `| ${what} | ${Math.round(median)} | ${Math.round(max)} | ${target} | ${max < target ? 'yes' : 'no'} |`;
};
writeBenchSection(
  'spot',
  `## Interruptible leases: from a preempting start to the notice and to the winner running

${machineLine()}

Billing as its own process, a provider daemon as its own process as root (workloads in the bubblewrap sandbox, its poll
every 1 s, no NATS), \`billing.preemption_grace\` ${GRACE_S} s. ${RUNS} runs: a bid of 1 per GPU-hour holds all 8 GPUs
with a workload that traps SIGTERM and runs on (killed at the end of the grace: the worst case for the winner), then
an on-demand rental of the 8 starts. Milliseconds from the on-demand start's answer:

| interval | median | max | target | max within it |
|---|---|---|---|---|
${row('to SIGTERM inside the preempted workload', toTerm, TARGET_TERM_MS)}
${row("to the winner's workload running", toRunning, TARGET_RUNNING_MS)}

Billing ends the bid at the notice, in the start's own transaction; the daemon learns it at its next poll (at most
1 s; with NATS, at once, from the machine's nudge), asks billing for the notice, writes it inside the workload and
sends SIGTERM; the grace runs from then, and the winner's workload starts on the GPUs once the old one is gone. The
notice the workload read: \`${notice.trim()}\`.`,
);
process.exit(0);
