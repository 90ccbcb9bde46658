/**
 * The child's end of the supervisor's lifeline (scripts/lib/supervisor.ts; the terms: @gpu/common/lifeline), preloaded
 * into every program `pnpm start` runs (`node --import <this file, compiled>`): Node has no prctl(PR_SET_PDEATHSIG),
 * so a child learns that its supervisor is gone from a pipe instead. The supervisor holds one end of it and never
 * writes; the kernel closes that end when the supervisor exits in any way (Ctrl-C, a closed terminal, a crash,
 * `kill -9`), and this side then reads end-of-file. The program is then stopped as `pnpm start` stops it: SIGTERM to
 * its process group (itself, so its own handler shuts it down gracefully, and whatever it started), SIGKILL to the
 * group if it still runs after the grace period the supervisor gave, and at its exit SIGKILL to anything it started
 * that is left.
 *
 * Nothing happens without SUPERVISOR_LIFELINE in the environment (`<fd>:<grace ms>`), which is removed at once so
 * that the programs this one starts do not look for a descriptor they do not have.
 */
import { readdirSync } from 'node:fs';
import { Socket } from 'node:net';
import { LIFELINE_ENV, parseLifeline } from '@gpu/common/lifeline';
import { procStat } from './proc.ts';

const lifeline = parseLifeline(process.env[LIFELINE_ENV]);
delete process.env[LIFELINE_ENV];

/** Sends `signal` to this process's group (its own when it leads one, as the supervisor's children do), or to itself. */
function signalGroup(signal: NodeJS.Signals): void {
  try {
    process.kill(-process.pid, signal);
  } catch {
    process.kill(process.pid, signal);
  }
}

/** The other processes of this process's group (what it started and left running), from /proc; none elsewhere. */
function othersInGroup(): number[] {
  const others: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return others;
  }
  for (const entry of entries) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    // Gone meanwhile, or not ours to read: no fields.
    const pgrp = procStat(pid)?.[2];
    if (pgrp !== undefined && Number(pgrp) === process.pid) others.push(pid);
  }
  return others;
}

function supervisorGone(graceMs: number): void {
  // A program without a SIGTERM handler of its own still exits through 'exit' (below), not killed by the signal.
  if (process.listenerCount('SIGTERM') === 0) process.once('SIGTERM', () => process.exit(128 + 15));
  signalGroup('SIGTERM');
  setTimeout(() => signalGroup('SIGKILL'), graceMs).unref();
  process.once('exit', () => {
    for (const pid of othersInGroup()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Gone meanwhile.
      }
    }
  });
}

if (lifeline) {
  const line = new Socket({ fd: lifeline.fd, readable: true, writable: false });
  let lost = false;
  const onLost = () => {
    if (lost) return;
    lost = true;
    supervisorGone(lifeline.graceMs);
  };
  line.once('end', onLost);
  line.once('close', onLost);
  line.on('error', onLost);
  line.resume();
  // The lifeline alone never keeps a program running.
  line.unref();
}
