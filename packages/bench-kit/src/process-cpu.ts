/**
 * CPU time of the processes a benchmark runs on, read from /proc (Linux): the test PostgreSQL (its postmaster,
 * its live backends and the backends it has reaped), the test nats-server, and the whole machine (every process,
 * the other users of a shared machine included). Elsewhere the readings are null and the report says so.
 * The test servers are found by the pid files scripts/test-env.sh writes under TEST_ENV_DIR.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Clock ticks per second of /proc's times (USER_HZ: 100 on every Linux the project runs on). */
const TICK_MS = 10;

/** CPU milliseconds used so far, by whom. */
export interface CpuSnapshot {
  postgres: number | null;
  nats: number | null;
  /** The whole machine (all cores, all processes), from /proc/stat. */
  machine: number | null;
}

interface ProcTimes {
  ppid: number;
  /** Own user + system time, ms. */
  own: number;
  /** Reaped children's user + system time, ms. */
  children: number;
}

function procTimes(pid: number): ProcTimes | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces): state ppid ... utime(14) stime cutime cstime.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      ppid: Number(f[1]),
      own: (Number(f[11]) + Number(f[12])) * TICK_MS,
      children: (Number(f[13]) + Number(f[14])) * TICK_MS,
    };
  } catch {
    return null;
  }
}

/** A live process's own CPU milliseconds so far (null where /proc cannot tell). */
export function processMs(pid: number): number | null {
  return procTimes(pid)?.own ?? null;
}

function pidFrom(file: string): number | null {
  try {
    const pid = Number.parseInt(readFileSync(file, 'utf8').split('\n')[0]!, 10);
    return Number.isFinite(pid) ? pid : null;
  } catch {
    return null;
  }
}

/** The postmaster's time, its reaped backends' and its live backends'. */
function postgresMs(postmaster: number): number | null {
  const main = procTimes(postmaster);
  if (!main) return null;
  let total = main.own + main.children;
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    const t = procTimes(pid);
    if (t?.ppid === postmaster) total += t.own;
  }
  return total;
}

function machineMs(): number | null {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal: busy is everything but idle and iowait.
    const busy = cpu[0]! + cpu[1]! + cpu[2]! + cpu[5]! + cpu[6]! + cpu[7]!;
    return busy * TICK_MS;
  } catch {
    return null;
  }
}

/** Reads the CPU time used so far by the test servers under `envDir` and by the machine. */
export function cpuSnapshot(envDir: string | undefined): CpuSnapshot {
  const pg = envDir ? pidFrom(join(envDir, 'pg', 'data', 'postmaster.pid')) : null;
  const nats = envDir ? pidFrom(join(envDir, 'nats.pid')) : null;
  return {
    postgres: pg === null ? null : postgresMs(pg),
    nats: nats === null ? null : (procTimes(nats)?.own ?? null),
    machine: machineMs(),
  };
}

/** CPU milliseconds used between two snapshots (null where either could not be read). */
export function cpuSince(before: CpuSnapshot, after: CpuSnapshot): CpuSnapshot {
  const d = (a: number | null, b: number | null) => (a === null || b === null ? null : b - a);
  return {
    postgres: d(before.postgres, after.postgres),
    nats: d(before.nats, after.nats),
    machine: d(before.machine, after.machine),
  };
}
