/**
 * A program run with a terminal (`gpu exec -t`, a shell) whose reader stops reading: its output waits on its terminal,
 * as a pipe's does, never piling up in the daemon's memory (a renter who stops reading `yes` must not run the
 * provider's daemon out of memory).
 */
import { describe, expect, it } from 'vitest';
import { startExec } from '../src/reach/exec.ts';

const MiB = 1024 * 1024;

describe('a program with a terminal', () => {
  it('is held up while its reader is: what it printed meanwhile stays bounded', async () => {
    const proc = startExec(
      { file: '/bin/sh', args: ['-c', 'exec cat /dev/zero'], env: { PATH: '/usr/bin:/bin' } },
      { cols: 80, rows: 24 },
    );
    try {
      // Read a little, then stop reading (the renter's stream held back) for two seconds.
      let read = 0;
      const reading = (chunk: Buffer) => {
        read += chunk.length;
      };
      proc.stdout.on('data', reading);
      await expect.poll(() => read, { timeout: 10_000 }).toBeGreaterThan(0);
      proc.stdout.off('data', reading);
      proc.stdout.pause();
      await new Promise((r) => setTimeout(r, 2000));
      // What waits in the daemon: its stream's buffers, both sides (a terminal's output goes through a PassThrough).
      const buffered = proc.stdout as unknown as { readableLength: number; writableLength?: number };
      const held = buffered.readableLength + (buffered.writableLength ?? 0);
      expect(held).toBeLessThan(4 * MiB);
      // Read again: it goes on.
      const before = read;
      proc.stdout.on('data', reading);
      proc.stdout.resume();
      await expect.poll(() => read - before, { timeout: 10_000 }).toBeGreaterThan(MiB);
    } finally {
      proc.signal('KILL');
      await proc.ended;
    }
  });
});
