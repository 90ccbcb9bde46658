/**
 * Where `pnpm start` puts what its processes print. Every line of a process goes into its own log file in the data
 * folder, as the process wrote it (`<data>/logs/<name>.log`: a service's JSON lines, one per request among them, for
 * `jq`); the terminal gets what a person starting the platform needs: warnings and errors (a JSON log line of level
 * `warn` or above, shown in one short line: `[billing] warn: event publish failing for 31 s; will retry (err: ...)`)
 * and whatever a process prints that is not a log line (s3rver's and the chain's start-up lines, a crash's stack
 * trace, nginx's complaints). A log file that reaches `maxBytes` is moved to `<name>.log.1` (the one before is
 * dropped), so each process keeps at most twice that.
 *
 *   const output = new PlatformOutput(path.join(data, 'logs'), (line) => process.stdout.write(`${line}\n`));
 *   const supervisor = new Supervisor({ output: (name, _stream, line) => output.line(name, line) });
 *   output.logged();   // { warnings, errors } shown since the last call: the periodic summary's
 */
import { closeSync, mkdirSync, openSync, renameSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';

/** A log file's size past which it is moved aside (64 MiB). */
const MAX_LOG_BYTES = 64 * 1024 * 1024;

/** pino's levels by number, for a logger that writes them so (the services write the labels). */
const LEVEL_LABELS: Record<number, string> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'fatal',
};
/** The levels a person at the terminal sees, and how each counts in the summary. */
const SHOWN: Record<string, 'warnings' | 'errors'> = { warn: 'warnings', error: 'errors', fatal: 'errors' };
/** Fields every line has, or that say nothing at a glance (the log file keeps them). */
const UNSHOWN = new Set(['level', 'time', 'msg', 'service', 'instance_id', 'pid', 'hostname', 'trace_id', 'span_id']);

/** A field's value in one short piece: an error by its message, an object as compact JSON. */
function brief(value: unknown): string {
  if (typeof value === 'string') return value;
  const message = (value as { message?: unknown } | null)?.message;
  if (typeof message === 'string') return message;
  return JSON.stringify(value);
}

/** nats-server's log line (the embedded NATS): `[pid] date time [LVL] message`. */
const NATS_LINE = /^\[\d+\] \S+ \S+ \[(INF|DBG|TRC|WRN|ERR|FTL)\] (.*)$/;
/** Its levels shown at the terminal (the others stay in its log file). */
const NATS_LEVELS = { WRN: 'warn', ERR: 'error', FTL: 'fatal' } as const;

/**
 * How a line a process printed shows at the terminal (without its `[name]` prefix), or undefined when it is a log
 * line below `warn`, which only its log file keeps.
 */
export function terminalLine(line: string): { text: string; counts?: 'warnings' | 'errors' } | undefined {
  const nats = NATS_LINE.exec(line);
  if (nats) {
    const level = NATS_LEVELS[nats[1] as keyof typeof NATS_LEVELS];
    return level ? { text: `${level}: ${nats[2]}`, counts: SHOWN[level] } : undefined;
  }
  if (!line.startsWith('{')) return { text: line };
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return { text: line };
  }
  const level = typeof entry.level === 'number' ? LEVEL_LABELS[entry.level] : entry.level;
  if (typeof level !== 'string') return { text: line };
  const counts = SHOWN[level];
  if (!counts) return undefined;
  const fields = Object.entries(entry)
    .filter(([key, value]) => !UNSHOWN.has(key) && value !== undefined && value !== null)
    .map(([key, value]) => `${key}: ${brief(value)}`);
  const msg = typeof entry.msg === 'string' ? entry.msg : '';
  return { text: `${level}: ${msg}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`, counts };
}

/** One process's log file, appended to line by line, moved aside at `maxBytes`. */
class LogFile {
  private fd: number;
  private size: number;

  constructor(
    readonly file: string,
    private readonly maxBytes: number,
  ) {
    this.fd = openSync(file, 'a', 0o600);
    this.size = statSync(file).size;
  }

  write(line: string): void {
    if (this.size >= this.maxBytes) {
      closeSync(this.fd);
      renameSync(this.file, `${this.file}.1`);
      this.fd = openSync(this.file, 'a', 0o600);
      this.size = 0;
    }
    const bytes = Buffer.from(`${line}\n`);
    writeSync(this.fd, bytes);
    this.size += bytes.length;
  }

  close(): void {
    closeSync(this.fd);
  }
}

export class PlatformOutput {
  private readonly files = new Map<string, LogFile>();
  private counted = { warnings: 0, errors: 0 };
  private terminalOpen = true;

  /**
   * @param dir the log files' folder (made here, this user's alone: the lines can name users and addresses)
   * @param terminal where a line for the person at the terminal goes
   */
  constructor(
    readonly dir: string,
    private readonly terminal: (line: string) => void,
    private readonly maxBytes = MAX_LOG_BYTES,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The log file of process `name`. */
  fileOf(name: string): string {
    return path.join(this.dir, `${name}.log`);
  }

  /** A line process `name` printed: into its log file, and onto the terminal when it is for a person. */
  line(name: string, line: string): void {
    this.logFile(name).write(line);
    const shown = terminalLine(line);
    if (!shown) return;
    if (shown.counts) this.counted[shown.counts] += 1;
    if (this.terminalOpen) this.terminal(`[${name}] ${shown.text}`);
  }

  /** A line of `pnpm start`'s own (`[start] ...`): onto the terminal, and into `start.log`. */
  own(line: string): void {
    this.logFile('start').write(`${new Date().toISOString()} ${line}`);
    if (this.terminalOpen) this.terminal(line);
  }

  /** The warnings and errors shown since the last call. */
  logged(): { warnings: number; errors: number } {
    const counted = this.counted;
    this.counted = { warnings: 0, errors: 0 };
    return counted;
  }

  /**
   * After `pnpm start`'s last line: what its processes still print as they end goes to their files alone, so that
   * the last line at the terminal stays its own.
   */
  closeTerminal(): void {
    this.terminalOpen = false;
  }

  close(): void {
    for (const file of this.files.values()) file.close();
    this.files.clear();
  }

  private logFile(name: string): LogFile {
    let file = this.files.get(name);
    if (!file) {
      file = new LogFile(this.fileOf(name), this.maxBytes);
      this.files.set(name, file);
    }
    return file;
  }
}
