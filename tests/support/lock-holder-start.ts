/**
 * A stand-in for `pnpm start` in tests/instance-lock.test.ts: takes the data folder's lock as start.ts does (its file
 * name ends in start.ts, as a live holder's command line must), says whether it got it, and holds it until SIGTERM.
 *   node --import tsx tests/support/lock-holder-start.ts <data dir> <start at, epoch ms>
 * Every holder of a race waits for the same instant, so that they ask for the lock together.
 */
import { lockDataDir } from '../../scripts/lib/instance-lock.ts';

const [dir, startAt] = process.argv.slice(2);
while (Date.now() < Number(startAt)) {
  // Spin: a timer would wake each holder up to a millisecond late.
}
try {
  const lock = lockDataDir(dir!);
  // Ready for SIGTERM before saying so: the test sends it on reading "got", and a SIGTERM with no handler yet would
  // end this process without giving the lock back.
  process.once('SIGTERM', () => {
    lock.release();
    process.exit(0);
  });
  process.stdout.write('got\n');
  setInterval(() => {}, 60_000);
} catch (err) {
  process.stdout.write(`refused: ${(err as Error).message}\n`);
}
