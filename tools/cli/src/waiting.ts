/**
 * Waiting for a rented workload to run, as `gpu run` does before it follows the logs: it says on standard error what
 * it waits for (billing's `pending`: the machine's daemon has not taken the workload yet; `preparing`: the daemon
 * fetches its inputs and image and makes its sandbox) and for how long, and it stops waiting once the session ended
 * before the workload ran (its machine went offline, into error or maintenance, or was removed; the renter ended it).
 *
 * On a terminal the line is rewritten in place each second; elsewhere (a pipe, a log) a line is written when the
 * state changes and every `REPEAT_S` while it stays.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Context } from './cli.ts';
import { duration } from './format.ts';
import { type Workload, workloadOf } from './workload.ts';

const POLL_MS = 1000;
/** How often a line is repeated, off a terminal, while the state stays the same. */
const REPEAT_S = 10;

const WAITING: ReadonlySet<Workload['state']> = new Set(['pending', 'preparing']);

/** What a waiting workload waits for, in words. */
function waitingFor(w: Workload): string {
  const machine = w.session.provider_id;
  return w.state === 'pending'
    ? `waiting for machine ${machine} to take the workload`
    : `machine ${machine} is preparing the workload (its inputs, its image, its sandbox)`;
}

/** Whether the session ended while the workload never ran: nothing more will come of it. */
export function endedBeforeRunning(w: Workload): boolean {
  return WAITING.has(w.state) && w.session.ended_at !== null;
}

/**
 * Polls the session's workload until it runs, has ended, or its session ended before it ran; says what it waits for
 * on `out` meanwhile (nothing when it runs at the first look; nothing at all for null). Answers the workload as it
 * last stood.
 */
export async function untilRunning(ctx: Context, sessionId: string, out: NodeJS.WriteStream | null): Promise<Workload> {
  const started = Date.now();
  const terminal = out?.isTTY === true;
  let shown = '';
  let lastState: string | undefined;
  let lastWritten = 0;
  for (;;) {
    const w = await workloadOf(ctx, sessionId);
    if (!WAITING.has(w.state) || endedBeforeRunning(w)) {
      if (terminal && shown) out?.write('\n');
      return w;
    }
    const waited = Math.floor((Date.now() - started) / 1000);
    const line = `${waitingFor(w)} (${w.state}, ${duration(waited * 1000)})`;
    if (terminal) {
      out?.write(`\r${line.padEnd(shown.length)}`);
      shown = line;
    } else if (out && (w.state !== lastState || waited - lastWritten >= REPEAT_S)) {
      out.write(`${line}\n`);
      lastWritten = waited;
    }
    lastState = w.state;
    await sleep(POLL_MS);
  }
}
