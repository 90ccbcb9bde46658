/**
 * A small process supervisor for `pnpm start`: runs each program as a child process, restarts one that exits on its
 * own (after a delay that doubles with each crash in a row, up to a cap), gives up on one that keeps crashing soon
 * after it starts, and stops them all on request without restarting any. Every start, exit, restart and give-up is
 * logged with the child's pid, exit code or signal.
 *
 *   const supervisor = new Supervisor({ log: (line) => process.stderr.write(`${line}\n`) });
 *   supervisor.start({ name: 'auth', args: ['--import', 'tsx', 'src/server.ts'], cwd: 'services/auth' });
 *   process.once('SIGTERM', () => void supervisor.stop());
 */
import { type ChildProcess, spawn } from 'node:child_process';

/** One program to run. */
export interface ProcessSpec {
  name: string;
  /** The executable; this Node by default. */
  command?: string;
  args: string[];
  cwd: string;
  /** The child's whole environment (this process's when absent). */
  env?: NodeJS.ProcessEnv;
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
  private readonly entries: Entry[] = [];
  private stopping = false;

  constructor(opts: SupervisorOptions = {}) {
    this.policy = { ...DEFAULT_RESTART_POLICY, ...opts.policy };
    this.log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.output =
      opts.output ??
      ((name, stream, line) => (stream === 'stdout' ? process.stdout : process.stderr).write(`[${name}] ${line}\n`));
    this.onGiveUp = opts.onGiveUp ?? (() => {});
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
   * Stops every child (SIGTERM, the last started first, all at once) and restarts none; a child still running after
   * `timeoutMs` is killed (SIGKILL). Resolves when every child has exited.
   */
  async stop(timeoutMs = 15_000): Promise<void> {
    this.stopping = true;
    for (const entry of this.entries) {
      clearTimeout(entry.timer);
      if (entry.state === 'restarting') entry.state = 'stopped';
    }
    const running = [...this.entries].reverse().filter((e) => e.child && e.state === 'running');
    for (const entry of running) entry.child?.kill('SIGTERM');
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
        entry.child?.kill('SIGKILL');
      }
      await all;
    }
  }

  /** Sends a signal to every running child at once, synchronously (for a last-moment `process.on('exit')`). */
  signalAll(signal: NodeJS.Signals): void {
    for (const entry of this.entries) if (entry.state === 'running') entry.child?.kill(signal);
  }

  private spawn(entry: Entry): void {
    const { spec } = entry;
    // Its own process group: a Ctrl-C at the terminal reaches this process only, which then stops the children in
    // order, rather than every child at once behind the supervisor's back.
    const child = spawn(spec.command ?? process.execPath, spec.args, {
      cwd: spec.cwd,
      env: spec.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
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
    if (child.pid !== undefined) this.log(`[start] ${entry.name} started (pid ${child.pid})`);
  }

  private exited(
    entry: Entry,
    child: ChildProcess,
    code: number | null,
    signal: NodeJS.Signals | null,
    error?: Error,
  ): void {
    if (entry.child !== child) return;
    entry.child = undefined;
    entry.pid = undefined;
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
