/** Processes of the machine by PID, and as themselves: a PID the kernel gives again is another process. */
import { readFileSync } from 'node:fs';

/** `/proc/<pid>/stat`'s fields after the name (the state first), or null when the process is gone. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** When the process started (`/proc/<pid>/stat`'s 22nd field, in clock ticks since boot), or null when it is gone. */
function startTimeOf(pid: number): string | null {
  return statFields(pid)?.[19] ?? null;
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
  const fields = ref === null ? null : statFields(ref.pid);
  return fields !== null && fields[0] !== 'Z' && fields[19] === ref!.start ? ref!.pid : null;
}

/** Whether a process runs as `pid` (a zombie does not). */
export function running(pid: number): boolean {
  const fields = statFields(pid);
  return fields !== null && fields[0] !== 'Z';
}
