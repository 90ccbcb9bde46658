/**
 * A session's workload as its renter sees it: its state at billing, its logs and outputs in the renter's storage
 * (the machine's daemon uploads the logs every few seconds while it runs and whole at its end, then the outputs,
 * and tells billing what it wrote: services/billing README, "Workloads").
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, type BillingSchemas, type ObjectRef, type ObjectStore, unwrap } from '@gpu/client';
import { UNDELIVERED_END_REASONS } from '@gpu/common/market-terms';
import type { Context } from './cli.ts';
import { downloadFile } from './download.ts';
import { transferProgress } from './progress.ts';

export type Workload = BillingSchemas['Workload'];

const ENDED = new Set<Workload['state']>(['exited', 'failed', 'stopped']);

/** How often a follower asks billing and storage what is new. */
const POLL_MS = 1000;
/**
 * How long after its end a workload's logs may still grow: the daemon uploads them whole right after it reports the
 * end, then its outputs, and says so (`outputs`); one that left no outputs says nothing, so the follower stops once
 * its logs have not grown for this long.
 */
const SETTLE_MS = 3000;
/**
 * How long a follower waits, once the session of a workload that still shows running ended because its machine
 * stopped delivering (the registry took it for offline, in error or maintenance, or it was removed), before it takes
 * the workload for lost with the machine: a machine that is gone never reports the workload's end. Any other end (the
 * renter's, a cap) is followed until the daemon reports the workload's end, however long its stop takes.
 */
const LOST_SETTLE_MS = 10_000;

const MACHINE_GONE: ReadonlySet<string> = new Set(UNDELIVERED_END_REASONS);

/** The session's workload as billing has it now. */
export function workloadOf(ctx: Context, sessionId: string): Promise<Workload> {
  return ctx.billing
    .GET('/api/v1/billing/sessions/{sessionID}/workload', { params: { path: { sessionID: sessionId } } })
    .then(unwrap);
}

function hasEnded(w: Workload): boolean {
  return ENDED.has(w.state);
}

/** Its session ended because its machine stopped delivering: the workload may have been lost with the machine. */
export function machineGone(w: Workload): boolean {
  return !hasEnded(w) && MACHINE_GONE.has(w.session.end_reason ?? '');
}

/** One log object, read from where the last read ended (it only grows: the sandbox cuts it, never rotates it). */
class LogTail {
  private offset = 0;

  constructor(
    private readonly objects: ObjectStore,
    private readonly ref: ObjectRef,
    private readonly sink: NodeJS.WritableStream,
  ) {}

  /** Writes what is new to the sink; whether there was anything. */
  async poll(): Promise<boolean> {
    let bytes: Uint8Array;
    try {
      const got = await this.objects.download(this.ref, this.offset > 0 ? { range: { start: this.offset } } : {});
      bytes = await got.bytes();
      // A store that sent it all, range or not: what was printed already is skipped.
      if (got.status === 200 && this.offset > 0) bytes = bytes.subarray(this.offset);
    } catch (err) {
      // Not uploaded yet, or nothing past what was read.
      if (err instanceof ApiError && (err.code === 'OBJECT_NOT_FOUND' || err.code === 'RANGE_NOT_SATISFIABLE')) {
        return false;
      }
      throw err;
    }
    if (bytes.length === 0) return false;
    this.offset += bytes.length;
    await new Promise<void>((resolve, reject) => this.sink.write(bytes, (err) => (err ? reject(err) : resolve())));
    return true;
  }
}

/**
 * Prints the workload's standard output log to `stdout` and its standard error log to `stderr`: what is there now, or
 * with `follow` what comes, until the workload has ended and its logs are whole. Answers the workload as it stands.
 */
export async function printLogs(
  ctx: Context,
  sessionId: string,
  opts: { follow: boolean; stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream },
): Promise<Workload> {
  let w = await workloadOf(ctx, sessionId);
  const logs = w.logs;
  if (!logs) throw new Error(`the workload of session ${sessionId} keeps its logs on its machine, not in storage`);
  const ref = (key: string) => ({ ...(logs.bucket ? { bucket: logs.bucket } : {}), key });
  const tails = [
    new LogTail(ctx.objects, ref(logs.stdout), opts.stdout),
    new LogTail(ctx.objects, ref(logs.stderr), opts.stderr),
  ];
  const poll = async () => {
    let grew = false;
    for (const tail of tails) grew = (await tail.poll()) || grew;
    return grew;
  };
  if (!opts.follow) {
    await poll();
    return w;
  }
  let quietSince = Date.now();
  let endSeen: number | undefined;
  let goneSeen: number | undefined;
  for (;;) {
    // The logs are read after the workload: once it names its outputs, this read has its logs whole.
    if (await poll()) quietSince = Date.now();
    if (hasEnded(w)) {
      endSeen ??= Date.now();
      const settled = Date.now() - Math.max(quietSince, endSeen) >= SETTLE_MS;
      if (w.outputs !== null || settled) return w;
    } else if (machineGone(w)) {
      goneSeen ??= Date.now();
      if (Date.now() - Math.max(quietSince, goneSeen) >= LOST_SETTLE_MS) return w;
    }
    await sleep(POLL_MS);
    w = await workloadOf(ctx, sessionId);
  }
}

/**
 * Downloads the workload's outputs into `dir`, each at its path under the output prefix (`<prefix>output/<path>`);
 * answers where each went. Each is written as `gpu storage cp` writes a file (download.ts): through a temporary file
 * renamed once whole, so an interrupted run leaves no part of an output under its name, and the bytes kept are asked
 * for no more when the same outputs are fetched again into the same folder.
 */
export async function downloadOutputs(
  ctx: Context,
  w: Workload,
  dir: string,
): Promise<{ key: string; size: number; file: string }[]> {
  const root = path.resolve(dir);
  const under = `${w.spec.output?.prefix ?? ''}output/`;
  const saved = [];
  for (const out of w.outputs ?? []) {
    const relative = out.key.startsWith(under) ? out.key.slice(under.length) : path.posix.basename(out.key);
    const file = path.resolve(root, relative);
    // Billing keeps every output under its prefix; a path that would leave the folder is refused all the same.
    if (!file.startsWith(`${root}${path.sep}`)) throw new Error(`output ${out.key} would be written outside ${dir}`);
    mkdirSync(path.dirname(file), { recursive: true });
    const progress = transferProgress(`${out.key} -> ${file}`, out.size, { json: ctx.json });
    try {
      await downloadFile(ctx, { ...(out.bucket ? { bucket: out.bucket } : {}), key: out.key }, file, progress);
    } finally {
      progress.stop();
    }
    saved.push({ key: out.key, size: out.size, file });
  }
  return saved;
}

/**
 * The exit status a run ends with: the workload's own exit code; as a shell says it, 127 for a program that is not
 * there and 126 for one that cannot be run (neither started, nor was billed); 1 when it failed or was stopped.
 */
export function exitStatusOf(w: Workload): number {
  const code = w.exit_code;
  if (w.state === 'failed' && w.reason === 'command_not_found') return 127;
  if (w.state === 'failed' && w.reason === 'command_not_executable') return 126;
  return w.state === 'exited' && code !== null && code >= 0 && code <= 255 ? code : 1;
}

/** A stream that keeps what is written to it, as text. */
export function collector(): Writable & { text(): string } {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(chunk);
      done();
    },
  });
  return Object.assign(sink, { text: () => Buffer.concat(chunks).toString('utf8') });
}
