/**
 * A renter's program running in a workload (entry.ts says how it enters): its standard streams as pipes, or a
 * terminal of its own (a PTY, `@lydell/node-pty`: window size, Ctrl-C to its foreground program, job control).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import * as pty from '@lydell/node-pty';
import type { EntryCommand } from '../workloads/entry.ts';

/** How it ended: its exit code, or the signal that ended it. */
interface ExecEnd {
  code: number | null;
  signal: string | null;
}

export interface ExecProcess {
  stdin: Writable;
  stdout: Readable;
  /** Null with a terminal (its errors are on the terminal too). */
  stderr: Readable | null;
  /** A terminal's new size (none without one). */
  resize(cols: number, rows: number): void;
  /** Sends a signal to it and what it started in its process group (`INT`, `TERM`, `KILL`, ...). */
  signal(name: string): void;
  readonly ended: Promise<ExecEnd>;
}

const SIGNAL = /^[A-Z0-9]{2,8}$/;

/**
 * Signals the process group `pid` leads: nsenter waits for the program it started in the workload's PID namespace
 * and passes no signal on, so the group (its program and what that started, unless it left the group) gets it.
 */
function signalGroup(pid: number | undefined, name: string): void {
  if (!pid || !SIGNAL.test(name)) return;
  try {
    process.kill(-pid, `SIG${name}` as NodeJS.Signals);
  } catch {
    // Gone meanwhile, or no such signal.
  }
}

/** Runs the command with pipes, or in a terminal of `cols` x `rows`. */
export function startExec(command: EntryCommand, tty: { cols: number; rows: number } | null): ExecProcess {
  if (!tty) {
    // A process group of its own (`detached`), which its signals reach.
    const child = spawn(command.file, command.args, {
      env: command.env,
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: '/',
      detached: true,
    });
    // A program that exits before reading its input resets the pipe: that is its end, not an error.
    child.stdin.on('error', () => {});
    const ended = new Promise<ExecEnd>((resolve) => {
      child.once('error', () => resolve({ code: 126, signal: null }));
      child.once('close', (code, signal) => resolve({ code, signal: signal ? signal.replace(/^SIG/, '') : null }));
    });
    return {
      stdin: child.stdin,
      stdout: child.stdout,
      stderr: child.stderr,
      resize: () => {},
      signal: (name) => signalGroup(child.pid, name),
      ended,
    };
  }
  const term = pty.spawn(command.file, command.args, {
    name: 'xterm-256color',
    cols: tty.cols,
    rows: tty.rows,
    cwd: '/',
    env: command.env,
  });
  const stdout = new PassThrough();
  // Held up while its reader is (the renter's stream): the program waits on its terminal, never the daemon's memory.
  const data = term.onData((d) => {
    if (!stdout.write(d)) {
      term.pause();
      stdout.once('drain', () => term.resume());
    }
  });
  const stdin = new PassThrough();
  const decoder = new StringDecoder('utf8');
  stdin.on('data', (chunk: Buffer) => term.write(decoder.write(chunk)));
  const ended = new Promise<ExecEnd>((resolve) => {
    term.onExit(({ exitCode, signal }) => {
      data.dispose();
      stdout.end();
      resolve(signal ? { code: null, signal: String(signal) } : { code: exitCode, signal: null });
    });
  });
  return {
    stdin,
    stdout,
    stderr: null,
    resize: (cols, rows) => {
      try {
        term.resize(Math.max(1, cols), Math.max(1, rows));
      } catch {
        // It ended meanwhile.
      }
    },
    // The terminal's process leads its own session and group.
    signal: (name) => signalGroup(term.pid, name),
    ended,
  };
}

/** Waits for the stream's end (or its error). */
export async function drained(stream: Readable): Promise<void> {
  if (stream.readableEnded) return;
  await Promise.race([once(stream, 'end'), once(stream, 'close'), once(stream, 'error')]).catch(() => {});
}
