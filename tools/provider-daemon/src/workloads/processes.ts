/** Processes of the machine by PID, and as themselves: a PID the kernel gives again is another process. */
import { readFileSync } from 'node:fs';

/** When the process started (`/proc/<pid>/stat`'s 22nd field, in clock ticks since boot), or null when it is gone. */
export function startTimeOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

/**
 * A process as itself, not its number: the PID and when it started. The kernel gives a PID again once its process is
 * gone, so a PID alone names whatever runs under it now: another session's workload, or the machine's own.
 */
export interface ProcessRef {
  pid: number;
  start: string;
}

/** The process running as `pid` now, or null. */
export function processRef(pid: number): ProcessRef | null {
  const start = startTimeOf(pid);
  return start === null ? null : { pid, start };
}

/** The PID of `ref` while that very process runs (not a later one given its number), else null. */
export function pidWhileRunning(ref: ProcessRef | null): number | null {
  return ref !== null && running(ref.pid) && startTimeOf(ref.pid) === ref.start ? ref.pid : null;
}

/** Whether a process runs as `pid` (a zombie does not). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}
