/**
 * The fleet of the registry benchmark (bench/run.ts), a process of its own so that its CPU is not the service's:
 * sends heartbeats over NATS at a fixed rate (open loop: a fleet of daemons beats on its own clock, however slowly
 * the registry answers), each on `<prefix>.<provider ID>` with its owner's daemon token in the `Authorization`
 * header, as the provider daemon does, machines taken round robin over `machines`. One heartbeat in `metricsEvery`
 * carries its first GPU's metrics (new values each time, so they are written), the rest none (the daemon leaves out
 * metrics that did not move). Like the daemon, a machine's heartbeat asks for an answer (a reply subject) when it
 * carries metrics or when its last `answerEvery - 1` went unanswered, and is published otherwise
 * (`heartbeat_answer_every`, tools/provider-daemon/src/daemon.ts); `answerEvery` 1 asks every time. Counts the
 * answers and their latency from the send; what was applied of the published ones the registry's counters say.
 * Reads its job as JSON on stdin, prints `start` when it begins sending, then its results as JSON on stdout.
 */
import { fileCredentials } from '@gpu/common';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';

interface Job {
  natsUrl: string;
  /** The `.creds` file to connect with (empty: none). */
  natsCredentials: string;
  prefix: string;
  /** [provider ID, index of its owner's token] */
  machines: [string, number][];
  /** `Bearer <token>` per owner. */
  tokens: string[];
  perSecond: number;
  seconds: number;
  metricsEvery: number;
  /** The daemon's `heartbeat_answer_every`. */
  answerEvery: number;
  /**
   * Subject identity (the registry's `messaging.subject_identity`): per owner, `[owner ID, daemon client ID]`; each
   * heartbeat then goes on `<prefix>.<owner>.<client>.<provider ID>` with no token, answered on that client's inbox.
   */
  identities?: [string, string][];
}

const job = JSON.parse(await new Response(process.stdin as unknown as ReadableStream).text()) as Job;
const nc = await connect({
  servers: job.natsUrl,
  name: 'registry-bench-fleet',
  ...(job.natsCredentials ? { authenticator: fileCredentials(job.natsCredentials) } : {}),
});
const hdrs = job.tokens.map((t) => {
  const h = natsHeaders();
  h.set('Authorization', t);
  return h;
});
const total = Math.round(job.perSecond * job.seconds);
const sentAt = new Float64Array(total);
const latencies: number[] = [];
let ok = 0;
let refused = 0;
let asked = 0;
// Per machine, its heartbeats since the last that asked (as the daemon counts them; machines start half-way).
const unanswered = Uint8Array.from(job.machines, (_, i) => i % Math.max(1, job.answerEvery));
const run = `bench-${Math.random().toString(36).slice(2)}`;
const inbox = `_INBOX.${run}`;
// With subject identity each answer comes to its client's own inbox, `_INBOX.<client>.<run>.<n>`.
const clientInbox = job.identities?.map(([, client]) => `_INBOX.${client}.${run}`);
const answers = nc.subscribe(clientInbox ? `_INBOX.*.${run}.*` : `${inbox}.*`, {
  callback: (_err, msg) => {
    const n = Number(msg.subject.slice(msg.subject.lastIndexOf('.') + 1));
    latencies.push(performance.now() - sentAt[n]!);
    // Every answer starts with its status: `{"status_code":200,...`.
    if (msg.data[15] === 50 && msg.data[16] === 48 && msg.data[17] === 48) ok++;
    else refused++;
  },
});
await nc.flush();

process.stdout.write('start\n');
const cpuBefore = process.cpuUsage();
const start = performance.now();
let n = 0;
const empty = new Uint8Array(0);
while (n < total) {
  // However late this turn runs, send what the clock says is due by now.
  const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * job.perSecond));
  for (; n < due; n++) {
    const m = n % job.machines.length;
    const [id, owner] = job.machines[m]!;
    const metrics = n % job.metricsEvery === 0;
    const body = metrics
      ? JSON.stringify({ gpu_metrics: [{ index: 0, utilization_gpu: n % 101, temperature: 30 + (n % 60) }] })
      : empty;
    sentAt[n] = performance.now();
    const identity = job.identities?.[owner];
    const subject = identity ? `${job.prefix}.${identity[0]}.${identity[1]}.${id}` : `${job.prefix}.${id}`;
    const headers = identity ? undefined : hdrs[owner];
    if (metrics || unanswered[m]! + 1 >= job.answerEvery) {
      unanswered[m] = 0;
      asked++;
      nc.publish(subject, body, { headers, reply: `${clientInbox?.[owner] ?? inbox}.${n}` });
    } else {
      unanswered[m]!++;
      nc.publish(subject, body, headers ? { headers } : undefined);
    }
  }
  await new Promise((r) => setTimeout(r, 2));
}
const sendSeconds = (performance.now() - start) / 1000;
// Stragglers: answers still on their way, for up to 10 s.
const deadline = performance.now() + 10_000;
while (ok + refused < asked && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
const allSeconds = (performance.now() - start) / 1000;
const cpu = process.cpuUsage(cpuBefore);
answers.unsubscribe();
await nc.close();
latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
process.stdout.write(
  JSON.stringify({
    sent: total,
    asked,
    ok,
    refused,
    unanswered: asked - ok - refused,
    sendSeconds,
    allSeconds,
    p50: pct(50),
    p99: pct(99),
    cpuMs: (cpu.user + cpu.system) / 1000,
  }),
);
