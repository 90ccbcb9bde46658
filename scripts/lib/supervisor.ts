/**
 * A small process supervisor for `pnpm start`: runs each program as a child process, restarts one that exits on its
 * own (after a delay that doubles with each crash in a row, up to a cap), gives up on one that keeps crashing soon
 * after it starts, and stops them all on request without restarting any. Every start, exit, restart and give-up is
 * logged with the child's pid, exit code or signal.
 *
 * Children do not outlive the supervisor. Each runs in a process group of its own, which is what is signalled (stop:
 * SIGTERM, then SIGKILL after the timeout), so whatever a child started goes with it; a child's group is killed when
 * the child exits. And each child is handed a lifeline, a pipe on descriptor 3 of which the supervisor holds the other
 * end (named in the child's SUPERVISOR_LIFELINE, with the grace period): when the supervisor exits in any way, `kill -9`
 * included, the kernel closes it and a child that watches it (scripts/lib/lifeline.ts, preloaded) stops as on SIGTERM.
 * The lifeline's terms (its descriptor and variable) are @gpu/common/lifeline's, shared with whatever else starts
 * programs that must not outlive it (the tests' and the benchmarks' platforms).
 *
 *   const supervisor = new Supervisor({ log: (line) => process.stderr.write(`${line}\n`) });
 *   supervisor.start({ name: 'auth', args: ['--import', 'tsx', 'src/server.ts'], cwd: 'services/auth' });
 *   process.once('SIGTERM', () => void supervisor.stop());
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { LIFELINE_FD, lifelineEnv } from '@gpu/common/lifeline';

/** How long stop() waits, by default, before it kills a child, and how long a child whose supervisor is gone has. */
export const STOP_TIMEOUT_MS = 15_000;
/** The least time stop() gives the children it stops last (a store, a chain: they stop at once). */
const LAST_STOP_MS = 2000;

/** One program to run. */
export interface ProcessSpec {
  name: string;
  /** The executable; this Node by default. */
  command?: string;
  args: string[];
  cwd: string;
  /** The child's whole environment (this process's when absent). */
  env?: NodeJS.ProcessEnv;
  /** The signal that asks it to stop gracefully (SIGTERM unless given: nginx's graceful stop is SIGQUIT). */
  stopSignal?: NodeJS.Signals;
}

/** When and how often a child that exited is started again. */
export interface RestartPolicy {
  /** The delay before the first restart after a stable run, in ms; doubled for each further crash in a row. */
  initialDelayMs: number;
  /** The cap on that delay, in ms. */
  maxDelayMs: number;
  /** A run at least this long counts as stable: a crash after it starts the backoff (and the count) anew. */
  stableAfterMs: number;
  /** After this many crashes in a row, each within `stableAfterMs` of its start, the child is given up on. */
  maxRapidCrashes: number;
}

/** Restart after 0.5 s, 1 s, 2 s ... at most 30 s apart; give up after 8 crashes in a row within a minute of start. */
const DEFAULT_RESTART_POLICY: RestartPolicy = {
  initialDelayMs: 500,
  maxDelayMs: 30_000,
  stableAfterMs: 60_000,
  maxRapidCrashes: 8,
};

type SupervisedState = 'running' | 'restarting' | 'given-up' | 'stopped';

/** A supervised program, as seen from outside. */
export interface Supervised {
  readonly name: string;
  /** The pid of the current child (undefined while waiting to restart, after give-up or stop). */
  readonly pid: number | undefined;
  readonly state: SupervisedState;
  /** How many times it has been restarted. */
  readonly restarts: number;
}

export interface SupervisorOptions {
  policy?: Partial<RestartPolicy>;
  /** One line per start, exit, restart and give-up (default: standard error). */
  log?: (line: string) => void;
  /** A line of a child's output (default: onto this process's stdout/stderr, prefixed `[name]`). */
  output?: (name: string, stream: 'stdout' | 'stderr', line: string) => void;
  /** Called once when a child is given up on. */
  onGiveUp?: (supervised: Supervised) => void;
  /** Called whenever a child starts or exits, with every child running then (what a lock file records). */
  onChildren?: (running: readonly { name: string; pid: number }[]) => void;
  /**
   * How long a child whose supervisor is gone has to stop after its SIGTERM before it is killed with its group
   * (scripts/lib/lifeline.ts); STOP_TIMEOUT_MS by default.
   */
  lifelineGraceMs?: number;
}

interface Entry {
  spec: ProcessSpec;
  name: string;
  child: ChildProcess | undefined;
  pid: number | undefined;
  state: SupervisedState;
  restarts: number;
  /** Crashes in a row, each before `stableAfterMs`. */
  rapidCrashes: number;
  startedAt: number;
  timer: NodeJS.Timeout | undefined;
  exited: Promise<void>;
}

const describeExit = (code: number | null, signal: NodeJS.Signals | null) =>
  signal ? `signal ${signal}` : `code ${code}`;

export class Supervisor {
  private readonly policy: RestartPolicy;
  private readonly log: (line: string) => void;
  private readonly output: (name: string, stream: 'stdout' | 'stderr', line: string) => void;
  private readonly onGiveUp: (supervised: Supervised) => void;
  private readonly onChildren: (running: readonly { name: string; pid: number }[]) => void;
  private readonly lifelineGraceMs: number;
  private readonly entries: Entry[] = [];
  private stopping = false;

  constructor(opts: SupervisorOptions = {}) {
    this.policy = { ...DEFAULT_RESTART_POLICY, ...opts.policy };
    this.log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.output =
      opts.output ??
      ((name, stream, line) => (stream === 'stdout' ? process.stdout : process.stderr).write(`[${name}] ${line}\n`));
    this.onGiveUp = opts.onGiveUp ?? (() => {});
    this.onChildren = opts.onChildren ?? (() => {});
    this.lifelineGraceMs = opts.lifelineGraceMs ?? STOP_TIMEOUT_MS;
  }

  /** Starts a program under supervision. */
  start(spec: ProcessSpec): Supervised {
    if (this.stopping) throw new Error(`supervisor is stopping; not starting ${spec.name}`);
    const entry: Entry = {
      spec,
      name: spec.name,
      child: undefined,
      pid: undefined,
      state: 'running',
      restarts: 0,
      rapidCrashes: 0,
      startedAt: 0,
      timer: undefined,
      exited: Promise.resolve(),
    };
    this.entries.push(entry);
    this.spawn(entry);
    return entry;
  }

  /** Every supervised program, in start order. */
  list(): readonly Supervised[] {
    return this.entries;
  }

  /**
   * Stops every child (SIGTERM, or its own `stopSignal`, to its process group, the last started first, all at once) and
   * restarts none; a child still running after `timeoutMs` is killed with its group (SIGKILL). The children named in
   * `last` (what the others depend on: a store, a chain) are asked only once the others have exited, so that those
   * finish their work with them; they get what is left of `timeoutMs`, at least `LAST_STOP_MS`. Resolves when every
   * child has exited.
   */
  async stop(timeoutMs = STOP_TIMEOUT_MS, last: readonly string[] = []): Promise<void> {
    this.stopping = true;
    for (const entry of this.entries) {
      clearTimeout(entry.timer);
      if (entry.state === 'restarting') entry.state = 'stopped';
    }
    const deadline = Date.now() + timeoutMs;
    const lastOnes = new Set(last);
    await this.stopEntries(
      this.entries.filter((e) => !lastOnes.has(e.name)),
      timeoutMs,
    );
    await this.stopEntries(
      this.entries.filter((e) => lastOnes.has(e.name)),
      Math.max(deadline - Date.now(), LAST_STOP_MS),
    );
  }

  /** Stops `entries` at once (the last started first), killing those still running after `timeoutMs`. */
  private async stopEntries(entries: readonly Entry[], timeoutMs: number): Promise<void> {
    const running = [...entries].reverse().filter((e) => e.child && e.state === 'running');
    if (running.length === 0) return;
    for (const entry of running) signalGroup(entry.child, entry.spec.stopSignal ?? 'SIGTERM');
    const all = Promise.all(running.map((e) => e.exited));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      for (const entry of running.filter((e) => e.state === 'running')) {
        this.log(`[start] ${entry.name} (pid ${entry.pid}) did not stop within ${timeoutMs} ms; killing it`);
        signalGroup(entry.child, 'SIGKILL');
      }
      await all;
    }
  }

  /** Sends a signal to every running child's group at once, synchronously (for a last-moment `process.on('exit')`). */
  signalAll(signal: NodeJS.Signals): void {
    for (const entry of this.entries) if (entry.state === 'running') signalGroup(entry.child, signal);
  }

  private childrenChanged(): void {
    this.onChildren(
      this.entries.flatMap((e) => (e.pid !== undefined && e.state === 'running' ? [{ name: e.name, pid: e.pid }] : [])),
    );
  }

  private spawn(entry: Entry): void {
    const { spec } = entry;
    // Its own process group: a Ctrl-C at the terminal reaches this process only, which then stops the children in
    // order, rather than every child at once behind the supervisor's back; and signalling the group reaches whatever
    // the child started. Descriptor 3 is its lifeline (the file comment).
    const child = spawn(spec.command ?? process.execPath, spec.args, {
      cwd: spec.cwd,
      env: { ...(spec.env ?? process.env), ...lifelineEnv(this.lifelineGraceMs) },
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    // Held, never written: it closes when this process exits. A child that exits closes its end; nothing to report.
    child.stdio[LIFELINE_FD]?.on('error', () => {});
    entry.child = child;
    entry.pid = child.pid;
    entry.state = 'running';
    entry.startedAt = Date.now();
    this.forwardLines(entry.name, 'stdout', child.stdout);
    this.forwardLines(entry.name, 'stderr', child.stderr);
    entry.exited = new Promise((resolve) => {
      let done = false;
      const onEnd = (code: number | null, signal: NodeJS.Signals | null, error?: Error) => {
        if (done) return;
        done = true;
        this.exited(entry, child, code, signal, error);
        resolve();
      };
      child.once('exit', (code, signal) => onEnd(code, signal));
      // A child that could not be spawned at all (no such program) emits `error` and never `exit`.
      child.once('error', (err) => {
        if (child.pid === undefined) onEnd(null, null, err);
      });
    });
    if (child.pid !== undefined) {
      this.log(`[start] ${entry.name} started (pid ${child.pid})`);
      this.childrenChanged();
    }
  }

  private exited(
    entry: Entry,
    child: ChildProcess,
    code: number | null,
    signal: NodeJS.Signals | null,
    error?: Error,
  ): void {
    if (entry.child !== child) return;
    // Whatever it started and left behind goes with it (a group outlives its leader while a member lives).
    signalGroup(child, 'SIGKILL', false);
    entry.child = undefined;
    entry.pid = undefined;
    this.childrenChanged();
    const how = error ? `failed to start: ${error.message}` : `exited (${describeExit(code, signal)})`;
    if (this.stopping) {
      entry.state = 'stopped';
      return;
    }
    const ranMs = Date.now() - entry.startedAt;
    entry.rapidCrashes = ranMs >= this.policy.stableAfterMs ? 1 : entry.rapidCrashes + 1;
    if (entry.rapidCrashes >= this.policy.maxRapidCrashes) {
      entry.state = 'given-up';
      this.log(
        `[start] ${entry.name} (pid ${child.pid}) ${how} after ${ranMs} ms; it crashed ${entry.rapidCrashes} times ` +
          `in a row, each within ${this.policy.stableAfterMs} ms of starting: giving up on it (the others keep running)`,
      );
      this.onGiveUp(entry);
      return;
    }
    const delay = Math.min(this.policy.initialDelayMs * 2 ** (entry.rapidCrashes - 1), this.policy.maxDelayMs);
    entry.state = 'restarting';
    this.log(
      `[start] ${entry.name} (pid ${child.pid}) ${how} after ${ranMs} ms; restart ${entry.restarts + 1} in ${delay} ms`,
    );
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      if (this.stopping) return;
      entry.restarts += 1;
      this.spawn(entry);
    }, delay);
  }

  private forwardLines(name: string, stream: 'stdout' | 'stderr', readable: NodeJS.ReadableStream | null): void {
    if (!readable) return;
    let buf = '';
    readable.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      for (const line of lines) this.output(name, stream, line);
    });
    readable.on('end', () => {
      if (buf) this.output(name, stream, buf);
      buf = '';
    });
  }
}

/**
 * Sends `signal` to a child's process group (the child leads it: spawned detached), or, when there is no such group,
 * to the child itself (`alsoChild`: a child that exited is not signalled again).
 */
function signalGroup(child: ChildProcess | undefined, signal: NodeJS.Signals, alsoChild = true): void {
  if (child?.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    if (alsoChild) child.kill(signal);
  }
}
