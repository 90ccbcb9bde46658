/**
 * The fleet's rate (issue #41), for bench/run.ts: a million daemons beating every 30 seconds send 33,333 heartbeats a
 * second. Three measurements, in the same run:
 *
 * - over NATS, open loop: a load generator of its own (bench/heartbeat-nats-client.ts) sends the fleet's rate as the
 *   daemon does (a request where it needs an answer, published otherwise), while a scheduler of its own process
 *   (bench/discovery-client.ts, `startScheduler`) measures the discovery query with one client (its p99 is the one
 *   the issue judges under that load); what was
 *   applied from the service's own count of heartbeats written; CPU per process from /proc;
 * - over HTTP, closed loop: POST /providers/heartbeats, one owner's machines per request;
 * - the direct replay: the repository's batch write (`recordHeartbeats`, the statements the service sends for a batch)
 *   through a `pg` pool as the service's (prepared statements too) from this process, on batches of the service's
 *   size, no HTTP or NATS.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { type CpuSnapshot, cpuSince, cpuSnapshot, processMs } from '@gpu/bench-kit';
import { callbackPool } from '@gpu/common';
import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { RegistryDB } from '../src/db/schema.ts';
import { type Beat, recordHeartbeats } from '../src/db/status-repository.ts';
import { type LoadResult, runLoad } from './load.ts';

export interface Machine {
  id: string;
  owner_id: string;
}

export interface FleetJob {
  natsUrl: string;
  prefix: string;
  machines: Machine[];
  /** `Bearer <token>` of each owner's daemon. */
  daemons: Map<string, string>;
  perSecond: number;
  seconds: number;
  metricsEvery: number;
  /** The daemon's `heartbeat_answer_every`: a heartbeat without metrics asks for an answer once in this many. */
  answerEvery: number;
  /** The service's count of heartbeats written so far (its metrics). */
  written: () => Promise<number>;
  /**
   * Send as daemons holding NATS users auth issued (the service's `messaging.subject_identity` on): each owner's
   * heartbeats on subjects naming the owner and a daemon client of theirs, with no token.
   */
  subjectIdentity?: boolean;
  /**
   * The sender's nice value (0: the platform's priority). It stands in for a million remote machines, whose CPU is
   * not this machine's: at a lower priority it takes what the platform's processes leave, as they would never wait
   * for it. Its CPU is counted all the same.
   */
  nice: number;
  servicePid: number;
}

export interface FleetResult {
  sent: number;
  /** Heartbeats that asked for an answer (all of them over HTTP). */
  asked: number;
  /** Heartbeats the service wrote (over HTTP, those answered 200). */
  applied: number;
  ok: number;
  refused: number;
  unanswered: number;
  sendSeconds: number;
  allSeconds: number;
  /** Applied heartbeats per second, from the first send to the last write. */
  perSecond: number;
  p50: number;
  p99: number;
  /** Discovery's one-client latency during the load. */
  discovery: LoadResult;
  /** CPU milliseconds per heartbeat applied, by process. */
  cpu: { service: number | null; load: number; postgres: number | null; nats: number | null; machine: number | null };
  /** Machine CPU seconds per second. */
  coresBusy: number | null;
}

/** The scheduler's process (bench/discovery-client.ts): one query, measured with one client while the fleet beats. */
export interface Scheduler {
  /** Measures the query for `seconds` after a warm-up second (a second more in all). */
  during(seconds: number): Promise<LoadResult>;
  stop(): void;
}

/** Starts the scheduler's process: its `path` asked with `authorization`, `intervalMs` apart (0: back to back). */
export async function startScheduler(job: {
  port: number;
  authorization: string;
  path: string;
  intervalMs: number;
}): Promise<Scheduler> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('./discovery-client.ts', import.meta.url))],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const stop = () => child.stdin.end();
  process.once('exit', () => child.kill());
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => {
    const line = await lines.next();
    if (line.done) throw new Error(`the scheduler's process ended (exit code ${child.exitCode})`);
    return line.value;
  };
  child.stdin.write(`${JSON.stringify(job)}\n`);
  if ((await next()) !== 'ready') throw new Error("the scheduler's process did not start");
  // One measurement at a time: each answer is the line after its request.
  let queue: Promise<unknown> = Promise.resolve();
  const during = (seconds: number): Promise<LoadResult> => {
    const result = queue.then(async () => {
      child.stdin.write(`${JSON.stringify({ seconds })}\n`);
      return JSON.parse(await next()) as LoadResult;
    });
    queue = result.catch(() => undefined);
    return result;
  };
  return { during, stop };
}

/** Sends the fleet's heartbeats over NATS while `during` measures discovery. */
export async function fleetOverNats(job: FleetJob, during: (seconds: number) => Promise<LoadResult>) {
  const owners = [...job.daemons.keys()];
  const ownerIndex = new Map(owners.map((o, i) => [o, i]));
  const sender = [
    process.execPath,
    '--import',
    'tsx',
    fileURLToPath(new URL('./heartbeat-nats-client.ts', import.meta.url)),
  ];
  // Through `nice`, so that every thread of the process runs at its priority (a thread's own setpriority leaves the
  // threads V8 started before it at the old one).
  const [command, ...args] = job.nice === 0 ? sender : ['nice', '-n', String(job.nice), ...sender];
  const client = spawn(command!, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  client.stdin.end(
    JSON.stringify({
      natsUrl: job.natsUrl,
      natsCredentials: process.env.TEST_NATS_CREDS ?? '',
      prefix: job.prefix,
      machines: job.machines.map((m) => [m.id, ownerIndex.get(m.owner_id)]),
      tokens: owners.map((o) => job.daemons.get(o)),
      perSecond: job.perSecond,
      seconds: job.seconds,
      metricsEvery: job.metricsEvery,
      answerEvery: job.answerEvery,
      // A daemon client ID per owner (the machines are bound to none, so any daemon of the owner may beat them).
      identities: job.subjectIdentity ? owners.map((o) => [o, randomUUID()]) : undefined,
    }),
  );
  const writtenBefore = await job.written();
  let out = '';
  let started: { others: CpuSnapshot; service: number | null; at: number } | undefined;
  let discovery: Promise<LoadResult> | undefined;
  client.stdout.on('data', (chunk) => {
    out += chunk;
    if (!started && out.includes('start\n')) {
      started = { others: cpuSnapshot(process.env.TEST_ENV_DIR), service: processMs(job.servicePid), at: Date.now() };
      // Discovery from the second second on, while the fleet beats (its warm-up is the first second).
      discovery = during(Math.max(1, job.seconds - 2));
    }
  });
  const [exitCode] = (await once(client, 'close')) as [number | null];
  if (exitCode !== 0 || !started || !discovery) throw new Error(`the fleet's load generator exited with ${exitCode}`);
  // Published heartbeats get no answer: the service's count says when the last was written (it stops moving). The CPU
  // counted ends there too: at the snapshot taken before the read that first saw the final count (after it, the
  // machine only waits for the count to stay put, and each read of /metrics costs the service and PostgreSQL a count
  // of the fleet by status).
  const snapshot = () => ({
    others: cpuSnapshot(process.env.TEST_ENV_DIR),
    service: processMs(job.servicePid),
    at: Date.now(),
  });
  let end = snapshot();
  let written = await job.written();
  let lastWriteMs: number | undefined;
  const settleBy = Date.now() + 10_000;
  for (let quietSince = Date.now(); Date.now() - quietSince < 500 && Date.now() < settleBy; ) {
    await new Promise((r) => setTimeout(r, 100));
    const before = snapshot();
    const now = await job.written();
    if (now !== written) {
      written = now;
      end = before;
      lastWriteMs = quietSince = Date.now();
    }
  }
  const others = cpuSince(started.others, end.others);
  const serviceNow = end.service;
  const wallMs = end.at - started.at;
  const r = JSON.parse(out.slice(out.indexOf('start\n') + 6)) as Omit<
    FleetResult,
    'discovery' | 'cpu' | 'perSecond' | 'applied'
  > & {
    cpuMs: number;
  };
  const applied = written - writtenBefore;
  const allSeconds =
    lastWriteMs === undefined ? r.allSeconds : Math.max(r.allSeconds, (lastWriteMs - started.at) / 1000);
  const per = (ms: number | null) => (ms === null || applied === 0 ? null : ms / applied);
  return {
    ...r,
    applied,
    allSeconds,
    perSecond: applied / allSeconds,
    discovery: await discovery,
    cpu: {
      service: per(serviceNow === null || started.service === null ? null : serviceNow - started.service),
      load: r.cpuMs / Math.max(1, applied),
      postgres: per(others.postgres),
      nats: per(others.nats),
      machine: per(others.machine),
    },
    coresBusy: others.machine === null ? null : others.machine / wallMs,
  } satisfies FleetResult;
}

/** Each owner's machines, for batches of `perRequest` machines of one owner (owners with fewer are left out). */
function ownersWith(machines: Machine[], perRequest: number): [string, string[]][] {
  const byOwner = new Map<string, string[]>();
  for (const m of machines) byOwner.set(m.owner_id, [...(byOwner.get(m.owner_id) ?? []), m.id]);
  const owners = [...byOwner].filter(([, ids]) => ids.length >= perRequest);
  if (owners.length === 0) throw new Error(`no owner has ${perRequest} machines`);
  return owners;
}

/** The body of the `i`-th POST /providers/heartbeats: `perRequest` machines of one owner, and that owner. */
function batchBody(owners: [string, string[]][], perRequest: number, i: number): [string, string] {
  const [owner, ids] = owners[i % owners.length]!;
  const start = (i * perRequest) % (ids.length - perRequest + 1);
  const heartbeats = ids.slice(start, start + perRequest).map((provider_id) => ({ provider_id }));
  return [owner, JSON.stringify({ heartbeats })];
}

type Post = (path: string, body: string, authorization: string) => Promise<number>;

/** POST /providers/heartbeats, `perRequest` machines of one owner each, `concurrency` at once: heartbeats per second. */
export async function fleetOverHttp(opts: {
  machines: Machine[];
  daemons: Map<string, string>;
  perRequest: number;
  concurrency: number;
  seconds: number;
  post: Post;
}) {
  const owners = ownersWith(opts.machines, opts.perRequest);
  const result = await runLoad(
    async (i) => {
      const [owner, body] = batchBody(owners, opts.perRequest, i);
      return (await opts.post('/providers/heartbeats', body, opts.daemons.get(owner)!)) === 200;
    },
    { concurrency: opts.concurrency, seconds: opts.seconds },
  );
  return { ...result, beatsPerSecond: result.perSecond * opts.perRequest };
}

/**
 * POST /providers/heartbeats on the fleet's clock (open loop): `perSecond` heartbeats a second in requests of
 * `perRequest` machines of one owner, sent from this process whatever the answers' pace, while `during` measures
 * discovery; CPU per heartbeat by process as for NATS.
 */
export async function fleetOverHttpPaced(
  opts: {
    machines: Machine[];
    daemons: Map<string, string>;
    perRequest: number;
    perSecond: number;
    seconds: number;
    servicePid: number;
    post: Post;
  },
  during: (seconds: number) => Promise<LoadResult>,
): Promise<FleetResult> {
  const owners = ownersWith(opts.machines, opts.perRequest);
  const requests = Math.round((opts.perSecond * opts.seconds) / opts.perRequest);
  const latencies: number[] = [];
  let ok = 0;
  let refused = 0;
  const before = { others: cpuSnapshot(process.env.TEST_ENV_DIR), service: processMs(opts.servicePid) };
  const discovery = during(Math.max(1, opts.seconds - 2));
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  const inFlight: Promise<void>[] = [];
  let n = 0;
  while (n < requests) {
    const due = Math.min(
      requests,
      Math.floor(((performance.now() - start) / 1000) * (opts.perSecond / opts.perRequest)),
    );
    for (; n < due; n++) {
      const [owner, body] = batchBody(owners, opts.perRequest, n);
      const sent = performance.now();
      inFlight.push(
        opts.post('/providers/heartbeats', body, opts.daemons.get(owner)!).then(
          (status) => {
            latencies.push(performance.now() - sent);
            if (status === 200) ok += opts.perRequest;
            else refused += opts.perRequest;
          },
          () => {
            refused += opts.perRequest;
          },
        ),
      );
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  const sendSeconds = (performance.now() - start) / 1000;
  await Promise.all(inFlight);
  const allSeconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const others = cpuSince(before.others, cpuSnapshot(process.env.TEST_ENV_DIR));
  const serviceNow = processMs(opts.servicePid);
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
  const per = (ms: number | null) => (ms === null || ok === 0 ? null : ms / ok);
  return {
    sent: requests * opts.perRequest,
    asked: requests * opts.perRequest,
    applied: ok,
    ok,
    refused,
    unanswered: 0,
    sendSeconds,
    allSeconds,
    perSecond: ok / allSeconds,
    p50: pct(50),
    p99: pct(99),
    discovery: await discovery,
    cpu: {
      service: per(serviceNow === null || before.service === null ? null : serviceNow - before.service),
      // The load generator is this process (the scheduler has its own).
      load: (cpu.user + cpu.system) / 1000 / Math.max(1, ok),
      postgres: per(others.postgres),
      nats: per(others.nats),
      machine: per(others.machine),
    },
    coresBusy: others.machine === null ? null : others.machine / (allSeconds * 1000),
  };
}

/**
 * The direct replay: `recordHeartbeats` on batches of `batch` beats (each limited to its owner, one in `metricsEvery`
 * with its first GPU's metrics, as the fleet sends them) through a `pg` pool as the service's (its prepared statements
 * prepared), `workers` batches at once.
 */
export async function fleetDirect(opts: {
  pool: pg.Pool;
  machines: Machine[];
  batch: number;
  workers: number;
  seconds: number;
  metricsEvery: number;
}) {
  // Through the service's pool adapter, so its prepared statements are prepared here too.
  const db = new Kysely<RegistryDB>({ dialect: new PostgresDialect({ pool: callbackPool(opts.pool) }) });
  let n = 0;
  const result = await runLoad(
    async () => {
      const beats: Beat[] = [];
      for (let i = 0; i < opts.batch; i++, n++) {
        const m = opts.machines[(n * 7919) % opts.machines.length]!;
        beats.push({
          id: m.id,
          owner: m.owner_id,
          daemon: null,
          ...(n % opts.metricsEvery === 0
            ? { metrics: [{ index: 0, utilization_gpu: n % 101, temperature: 30 + (n % 60) }] }
            : {}),
        });
      }
      const written = await recordHeartbeats(db, beats);
      return written.every((w) => w !== undefined && !(w instanceof Error));
    },
    { concurrency: opts.workers, seconds: opts.seconds },
  );
  return { ...result, beatsPerSecond: result.perSecond * opts.batch };
}
