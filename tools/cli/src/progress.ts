/**
 * A transfer's progress bar on standard error (`cli-progress`), for a large transfer to or from a terminal only: none
 * when standard error is not a terminal (a script, a log file), none with --json, none for a small file. No colour.
 */
import { Transform } from 'node:stream';
import cliProgress from 'cli-progress';

/** From this size on a transfer shows its progress. */
const LARGE = 1024 * 1024;

export interface Progress {
  /** A stream that passes the bytes on as they are and counts them. */
  counter(): Transform;
  /** Ends the bar (left on screen at its last value). */
  stop(): void;
}

const NONE: Progress = {
  counter: () => new Transform({ transform: (chunk, _enc, done) => done(null, chunk) }),
  stop() {},
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
  return {
    counter: () =>
      new Transform({
        transform(chunk: Buffer, _enc, next) {
          done += chunk.length;
          bar.update(done, { done: mib(done) });
          next(null, chunk);
        },
      }),
    stop: () => bar.stop(),
  };
}
