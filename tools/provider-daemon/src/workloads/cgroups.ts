/**
 * The kernel's limits on a sandbox's memory and processes (a control group per workload), beside the sandbox's own
 * (sandbox.ts): its watch of resident memory looks once a second, and a workload that allocates faster than that
 * would reach the machine's memory (the kernel's OOM killer then picks a victim anywhere: another session's workload,
 * the daemon). In a control group the kernel stops it at its own limit, and only it.
 *
 * - cgroup v2 (`/sys/fs/cgroup/cgroup.controllers`): a directory of the daemon's (`workloads.cgroup_parent`, default
 *   `/sys/fs/cgroup/gpu-platform` for a daemon at the root of the hierarchy; under systemd a delegated one, the
 *   service's `Delegate=yes`), with `memory` and `pids` enabled for its children; each workload gets `memory.max`,
 *   `memory.swap.max` 0 and `pids.max`.
 * - cgroup v1 (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/pids`): `gpu-platform/<workload>` in each, with
 *   `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`: no swap) and `pids.max`.
 *
 * The limit is the workload's memory allowance plus a quarter (at least 64 MiB): the watch still stops one that
 * holds more than its allowance (`memory_limit`), the kernel one that grows faster than the watch looks; a workload
 * the kernel killed for memory is reported `memory_limit` too. Where no control group can be made (no permission, no
 * memory controller) the daemon says so once and the watch alone applies.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Where the workloads' control groups are made on this machine. */
export type CgroupPlace = { version: 2; dir: string } | { version: 1; memory: string; pids: string | null };

/** A workload's control group. */
export interface WorkloadCgroup {
  /** Moves the process (and so everything it starts afterwards) into it. */
  add(pid: number): void;
  /** Whether the kernel killed a process of it for memory. */
  oomKilled(): boolean;
  /** The processes in it now (none readable: empty). */
  procs(): number[];
  /** Where its directories show inside the sandbox (`/sys/fs/cgroup`, or v1's per controller) and on the host. */
  views(): [inside: string, host: string][];
  /** Removes it (once its processes are gone). */
  remove(): void;
}

/** The kernel's memory limit of a workload whose allowance is `bytes`. */
export const hardMemory = (bytes: number) => bytes + Math.max(64 * 1024 * 1024, Math.ceil(bytes / 4));

const ROOT = '/sys/fs/cgroup';

/**
 * The place for workloads' control groups on this machine, made when missing, or why there is none. `parent`: the
 * configured cgroup v2 directory (empty: `/sys/fs/cgroup/gpu-platform`).
 */
export function cgroupPlace(parent: string, root = ROOT): { place: CgroupPlace | null; problem: string | null } {
  try {
    if (existsSync(path.join(root, 'cgroup.controllers'))) {
      const dir = parent || path.join(root, 'gpu-platform');
      mkdirSync(dir, { recursive: true });
      const available = readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8').split(/\s+/);
      if (!available.includes('memory')) return { place: null, problem: `${dir}: no memory controller for it` };
      writeFileSync(path.join(dir, 'cgroup.subtree_control'), available.includes('pids') ? '+memory +pids' : '+memory');
      return { place: { version: 2, dir }, problem: null };
    }
    const memory = path.join(root, 'memory');
    if (!existsSync(path.join(memory, 'memory.limit_in_bytes'))) {
      return { place: null, problem: `${root}: neither cgroup v2 nor v1's memory controller` };
    }
    mkdirSync(path.join(memory, 'gpu-platform'), { recursive: true });
    const pids = path.join(root, 'pids');
    const hasPids = existsSync(path.join(pids, 'cgroup.procs'));
    if (hasPids) mkdirSync(path.join(pids, 'gpu-platform'), { recursive: true });
    return {
      place: {
        version: 1,
        memory: path.join(memory, 'gpu-platform'),
        pids: hasPids ? path.join(pids, 'gpu-platform') : null,
      },
      problem: null,
    };
  } catch (err) {
    return { place: null, problem: (err as Error).message };
  }
}

/** The count after `key` in a flat-keyed cgroup file (`oom_kill 2`), null when it is not there. */
function counter(file: string, key: string): number | null {
  try {
    const line = readFileSync(file, 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${key} `));
    return line ? Number(line.slice(key.length + 1)) : null;
  } catch {
    return null;
  }
}

/** The PIDs a `cgroup.procs` file lists. */
function procsOf(dir: string): number[] {
  try {
    return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Makes a control group, anew when an earlier life left one (empty: its processes are gone). */
function fresh(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // None there.
  }
  mkdirSync(dir);
}

/** Makes the workload's control group with its limits; throws when it cannot (the caller runs without). */
export function workloadCgroup(
  place: CgroupPlace,
  name: string,
  limits: { memoryBytes: number; processes: number },
): WorkloadCgroup {
  const memory = String(hardMemory(limits.memoryBytes));
  if (place.version === 2) {
    const dir = path.join(place.dir, name);
    fresh(dir);
    writeFileSync(path.join(dir, 'memory.max'), memory);
    if (existsSync(path.join(dir, 'memory.swap.max'))) writeFileSync(path.join(dir, 'memory.swap.max'), '0');
    if (existsSync(path.join(dir, 'pids.max'))) writeFileSync(path.join(dir, 'pids.max'), String(limits.processes));
    return {
      add: (pid) => writeFileSync(path.join(dir, 'cgroup.procs'), String(pid)),
      oomKilled: () => (counter(path.join(dir, 'memory.events'), 'oom_kill') ?? 0) > 0,
      procs: () => procsOf(dir),
      views: () => [['/sys/fs/cgroup', dir]],
      remove: () => rmdirSync(dir),
    };
  }
  const dirs = [path.join(place.memory, name), ...(place.pids ? [path.join(place.pids, name)] : [])];
  const [mem, pids] = dirs as [string, string | undefined];
  fresh(mem);
  writeFileSync(path.join(mem, 'memory.limit_in_bytes'), memory);
  // The same for memory and swap together: none of its memory goes to swap.
  if (existsSync(path.join(mem, 'memory.memsw.limit_in_bytes'))) {
    writeFileSync(path.join(mem, 'memory.memsw.limit_in_bytes'), memory);
  }
  if (pids) {
    fresh(pids);
    writeFileSync(path.join(pids, 'pids.max'), String(limits.processes));
  }
  return {
    add: (pid) => {
      for (const d of dirs) writeFileSync(path.join(d, 'cgroup.procs'), String(pid));
    },
    // Kernels before 4.13 count no kills: there, that it reached its limit at all.
    oomKilled: () =>
      (counter(path.join(mem, 'memory.oom_control'), 'oom_kill') ??
        Number(readFileSync(path.join(mem, 'memory.failcnt'), 'utf8'))) > 0,
    procs: () => procsOf(mem),
    views: () => [['/sys/fs/cgroup/memory', mem], ...(pids ? [['/sys/fs/cgroup/pids', pids] as [string, string]] : [])],
    remove: () => {
      for (const d of dirs) rmdirSync(d);
    },
  };
}
