/**
 * The renter's side of the reach benchmark (bench/reach.ts), a process of its own so that its CPU is not billing's
 * or the daemon's: it takes one job at a time over its IPC channel and answers with what it measured, the CPU it used
 * doing so (`process.cpuUsage()`) and that of the processes `pids` names (billing's, the daemon's), read from /proc
 * just before and after the timed part.
 *
 *   stream  a connection (a port-forward stream, raw bytes as `gpu port-forward` opens it, or TCP straight to the
 *           server) asks the stream server for `bytes`
 *           and reads them: milliseconds from the request to the last byte
 *   echo    over one connection, `count` times: `size` bytes sent, the same number read back; each round trip's ms
 *   keys    an exec stream with a terminal (`tty=true`, the workload's `stty raw -echo; cat`), `count` times: one byte
 *           sent on the input channel, its echo read on the output one; each round trip's ms
 */
import { connect } from 'node:net';
import { cpuSnapshot, processMs } from '@gpu/bench-kit';
import { openRawUpgrade } from '@gpu/common/raw-upgrade';
import WebSocket from 'ws';

/**
 * Where a connection goes: through billing's port-forward route (a raw byte stream, `Upgrade: tcp`, as `gpu
 * port-forward` opens it), or straight to a port on this machine.
 */
export type Target = { kind: 'raw'; url: string; headers: Record<string, string> } | { kind: 'tcp'; port: number };

export type Job =
  | { op: 'stream'; target: Target; bytes: number; pids: number[] }
  | { op: 'echo'; target: Target; size: number; count: number; warmup: number; pids: number[] }
  | { op: 'keys'; url: string; headers: Record<string, string>; count: number; warmup: number; pids: number[] };

export interface Answer {
  /** Milliseconds of the timed part (stream), or of each round trip (echo, keys). */
  ms: number[];
  /** CPU milliseconds of the timed part: this process's, each of `pids`', the whole machine's (all cores). */
  cpu: Cpu;
  error?: string;
}

/** Bytes received so far, and a wait until they reach a count. */
class Received {
  count = 0;
  private want = Number.POSITIVE_INFINITY;
  private wake: (() => void) | undefined;
  private fail: ((err: Error) => void) | undefined;

  add(n: number): void {
    this.count += n;
    if (this.count >= this.want) this.settle();
  }

  until(n: number): Promise<void> {
    if (this.count >= n) return Promise.resolve();
    this.want = n;
    return new Promise((resolve, reject) => {
      this.wake = resolve;
      this.fail = reject;
    });
  }

  /** The connection ended before the count came. */
  end(why: string): void {
    const fail = this.fail;
    this.wake = undefined;
    this.fail = undefined;
    fail?.(new Error(`the connection ended after ${this.count} bytes: ${why}`));
  }

  private settle(): void {
    const wake = this.wake;
    this.wake = undefined;
    this.fail = undefined;
    this.want = Number.POSITIVE_INFINITY;
    wake?.();
  }
}

/** A connection whose received bytes are counted. */
interface Connection {
  received: Received;
  send(data: Buffer): void;
  close(): void;
}

function openWs(url: string, headers: Record<string, string>, protocols: string[] = []): Promise<WebSocket> {
  const ws = new WebSocket(url, protocols, { headers, maxPayload: 64 * 1024 * 1024 });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += String(d);
      });
      res.on('end', () => reject(new Error(`${url} answered ${res.statusCode}: ${body}`)));
    });
    ws.once('error', reject);
  });
}

async function open(target: Target): Promise<Connection> {
  const received = new Received();
  const socket =
    target.kind === 'raw'
      ? await openRawUpgrade(target.url, { headers: target.headers })
      : connect({ port: target.port, host: '127.0.0.1', noDelay: true });
  if (target.kind === 'tcp') {
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
  }
  socket.on('data', (d: Buffer) => received.add(d.length));
  socket.once('close', () => received.end('closed'));
  socket.on('error', () => {});
  return { received, send: (d) => socket.write(d), close: () => socket.destroy() };
}

interface Cpu {
  client: number;
  pids: number[];
  machine: number;
}

/** CPU milliseconds so far: this process's, each of `pids`', the machine's. */
function cpuNow(pids: number[]): Cpu {
  const own = process.cpuUsage();
  return {
    client: (own.user + own.system) / 1000,
    pids: pids.map((p) => processMs(p) ?? 0),
    machine: cpuSnapshot(undefined).machine ?? 0,
  };
}

function cpuSince(before: Cpu, pids: number[]): Cpu {
  const now = cpuNow(pids);
  return {
    client: now.client - before.client,
    pids: now.pids.map((v, i) => v - before.pids[i]!),
    machine: now.machine - before.machine,
  };
}

async function stream(job: Extract<Job, { op: 'stream' }>): Promise<Answer> {
  const c = await open(job.target);
  const before = cpuNow(job.pids);
  const started = performance.now();
  c.send(Buffer.from(`${job.bytes}\n`));
  await c.received.until(job.bytes);
  const ms = performance.now() - started;
  const cpu = cpuSince(before, job.pids);
  c.close();
  return { ms: [ms], cpu };
}

/** `count` round trips of `send` and `expect` more bytes back (after `warmup` uncounted ones): each one's ms. */
async function roundTrips(
  received: Received,
  send: () => void,
  expect: number,
  count: number,
  warmup: number,
  pids: number[],
): Promise<Answer> {
  let want = received.count;
  const once = async () => {
    want += expect;
    const t = performance.now();
    send();
    await received.until(want);
    return performance.now() - t;
  };
  for (let i = 0; i < warmup; i++) await once();
  const before = cpuNow(pids);
  const ms: number[] = [];
  for (let i = 0; i < count; i++) ms.push(await once());
  return { ms, cpu: cpuSince(before, pids) };
}

async function echo(job: Extract<Job, { op: 'echo' }>): Promise<Answer> {
  const c = await open(job.target);
  const request = Buffer.alloc(job.size, 0x61);
  const answer = await roundTrips(c.received, () => c.send(request), job.size, job.count, job.warmup, job.pids);
  c.close();
  return answer;
}

async function keys(job: Extract<Job, { op: 'keys' }>): Promise<Answer> {
  const ws = await openWs(job.url, job.headers, ['v5.channel.k8s.io']);
  const received = new Received();
  let shown = '';
  let ready = false;
  const isReady = new Promise<void>((resolve) => {
    ws.on('message', (d: Buffer) => {
      if (d[0] !== 1) return;
      if (ready) return received.add(d.length - 1);
      shown += String(d.subarray(1));
      if (shown.includes('READY')) {
        ready = true;
        resolve();
      }
    });
  });
  ws.once('close', (code) => received.end(`closed ${code}: ${shown}`));
  await isReady;
  let i = 0;
  const key = () => ws.send(Buffer.of(0, 0x61 + (i++ % 26)));
  const answer = await roundTrips(received, key, 1, job.count, job.warmup, job.pids);
  ws.close();
  return answer;
}

process.on('message', (job: Job) => {
  const run = job.op === 'stream' ? stream(job) : job.op === 'echo' ? echo(job) : keys(job);
  run.then(
    (answer) => process.send?.(answer),
    (err: Error) =>
      process.send?.({ ms: [], cpu: { client: 0, pids: [], machine: 0 }, error: err.message } satisfies Answer),
  );
});
process.on('disconnect', () => process.exit(0));
