/**
 * Secrets come from the environment or from standard input, one a line, never from the command line (where `ps` and
 * the shell's history show them); typed at a terminal, they are not echoed.
 */
import { UsageError } from './cli.ts';

/** Lines of standard input, read one at a time (a program may pipe several: `printf '%s\n' old new | gpu ...`). */
export class SecretInput {
  private buffer = '';
  private chunks: AsyncIterator<Buffer | string> | undefined;
  private ended = false;

  /** The next line, prompted for as `what` at a terminal; a usage error when there is none. */
  async line(what: string): Promise<string> {
    const stdin = process.stdin;
    const tty = stdin.isTTY === true;
    if (tty) {
      process.stderr.write(`${what}: `);
      stdin.setRawMode(true);
    }
    try {
      this.chunks ??= stdin[Symbol.asyncIterator]();
      while (!this.ended && !this.buffer.includes('\n') && !this.buffer.includes('\u0003')) {
        const next = await this.chunks.next();
        if (next.done) this.ended = true;
        // A terminal in raw mode ends a line with a carriage return and sends backspace as DEL.
        else this.buffer += tty ? String(next.value).replaceAll('\r', '\n') : String(next.value);
      }
    } finally {
      if (tty) {
        stdin.setRawMode(false);
        process.stderr.write('\n');
      }
    }
    if (this.buffer.includes('\u0003')) throw new UsageError('interrupted');
    const end = this.buffer.indexOf('\n');
    let line = end < 0 ? this.buffer : this.buffer.slice(0, end);
    this.buffer = end < 0 ? '' : this.buffer.slice(end + 1);
    if (tty) line = [...line].reduce((typed, c) => (c === '\u007f' || c === '\b' ? typed.slice(0, -1) : typed + c), '');
    line = line.trim();
    if (!line) throw new UsageError(`no ${what} on standard input`);
    return line;
  }

  /** Stops reading standard input (so that the program can end). */
  async close(): Promise<void> {
    if (!this.chunks) return;
    await this.chunks.return?.();
    process.stdin.pause();
  }
}

/** Runs `read` with standard input's lines, and stops reading them afterwards whatever happened. */
export async function readSecrets<T>(read: (input: SecretInput) => Promise<T>): Promise<T> {
  const input = new SecretInput();
  try {
    return await read(input);
  } finally {
    await input.close();
  }
}

/** `env`'s value when set, else the next line of `input`; `input` is closed by the caller. */
export function secret(input: SecretInput, value: string | undefined, what: string): Promise<string> {
  return value ? Promise.resolve(value) : input.line(what);
}
