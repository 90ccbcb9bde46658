/**
 * A transfer's progress bar on standard error (`cli-progress`), for a large transfer to or from a terminal only: none
 * when standard error is not a terminal (a script, a log file), none with --json, none for a small file. No colour.
 */
import { Transform } from 'node:stream';
import cliProgress from 'cli-progress';

/** From this size on a transfer shows its progress. */
const LARGE = 1024 * 1024;

/** A stream that passes the bytes on as they are, counting them (`bytes`: how many went through it). */
type Counter = Transform & { bytes: number };

export interface Progress {
  /** A stream that passes the bytes on as they are and counts them, on the bar too. */
  counter(): Counter;
  /** Moves the bar by bytes that did not go through a counter (parts sent before; less, a part sent again). */
  add(bytes: number): void;
  /** Ends the bar (left on screen at its last value). */
  stop(): void;
  /** Writes `line` (ending in a newline) to standard error: at once without a bar, below the bar once it ends. */
  say(line: string): void;
}

function counter(onBytes: (n: number) => void): Counter {
  const stream = new Transform({
    transform(chunk: Buffer, _enc, next) {
      stream.bytes += chunk.length;
      onBytes(chunk.length);
      next(null, chunk);
    },
  }) as Counter;
  stream.bytes = 0;
  return stream;
}

const NONE: Progress = {
  counter: () => counter(() => {}),
  add() {},
  stop() {},
  say: (line) => process.stderr.write(line),
};

function mib(bytes: number): string {
  return (bytes / (1024 * 1024)).toFixed(1);
}

/** A bar for `total` bytes labelled `label`, or one that shows nothing when it should not. */
export function transferProgress(label: string, total: number | null, opts: { json: boolean }): Progress {
  if (opts.json || !process.stderr.isTTY || total === null || total < LARGE) return NONE;
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {percentage}% | {done}/{size} MiB | {eta_formatted}`,
      barCompleteChar: '#',
      barIncompleteChar: '-',
      hideCursor: null,
      fps: 5,
    },
    cliProgress.Presets.legacy,
  );
  let done = 0;
  bar.start(total, 0, { done: mib(0), size: mib(total) });
  const add = (bytes: number) => {
    done += bytes;
    bar.update(done, { done: mib(done) });
  };
  // Lines said while the bar is drawn wait for it to end (the bar keeps its place on screen; they come below it).
  const said: string[] = [];
  const stop = () => {
    bar.stop();
    for (const line of said.splice(0)) process.stderr.write(line);
  };
  return { counter: () => counter(add), add, stop, say: (line) => said.push(line) };
}
