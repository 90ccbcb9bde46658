/**
 * Whether a workload's program is there to run, looked up as `execvp` will look it up inside the sandbox or container
 * (its PATH, its current directory `/work`, links followed within its own view), before anything starts. A command
 * that is not there (a typo: `gpu run -- pyhton3 train.py`) never starts, so it is never billed: it fails
 * `command_not_found` (a shell's 127), or `command_not_executable` (126) for a file it could not run. The daemon
 * decides this from what it binds, not from anything the workload prints, so no workload can make its own run look
 * like one that never started.
 */
import { lstatSync, readlinkSync, type Stats, statSync } from 'node:fs';
import path from 'node:path';

/** A place a sandbox or container binds: `inside` is `host` on the machine. */
export interface ViewMount {
  inside: string;
  host: string;
}

export type CommandProblem = 'command_not_found' | 'command_not_executable';

/** The most links followed in one lookup (the kernel's own bound is 40). */
const MAX_LINKS = 40;

/** Where an absolute path inside the view is on the host (the longest bound prefix), or null when nothing binds it. */
function hostPath(view: ViewMount[], inside: string): string | null {
  let best: ViewMount | null = null;
  for (const m of view) {
    const under = inside === m.inside || inside.startsWith(m.inside === '/' ? '/' : `${m.inside}/`);
    if (under && (!best || m.inside.length > best.inside.length)) best = m;
  }
  return best ? path.join(best.host, path.relative(best.inside, inside)) : null;
}

/**
 * The file an absolute path inside the view names, its links followed inside the view (an absolute link means the
 * view's root, never the host's), or null when it is not there.
 */
function lookup(view: ViewMount[], inside: string): Stats | null {
  let pending = inside.split('/').filter(Boolean);
  let resolved = '/';
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '.') continue;
    if (part === '..') {
      resolved = path.posix.dirname(resolved);
      continue;
    }
    const next = path.posix.join(resolved, part);
    const host = hostPath(view, next);
    if (host === null) return null;
    let st: Stats;
    try {
      st = lstatSync(host);
    } catch {
      return null;
    }
    if (st.isSymbolicLink()) {
      if (++links > MAX_LINKS) return null;
      const target = readlinkSync(host);
      pending = [...target.split('/').filter(Boolean), ...pending];
      if (target.startsWith('/')) resolved = '/';
      continue;
    }
    if (pending.length > 0 && !st.isDirectory()) return null;
    resolved = next;
  }
  const host = hostPath(view, resolved);
  try {
    return host === null ? null : statSync(host);
  } catch {
    return null;
  }
}

/** Whether `st` is a file its user may execute (`uid`: the workload's; null: the daemon's own). */
function executable(st: Stats, uid: number | null): boolean {
  if (!st.isFile()) return false;
  if (uid === null || uid === 0) return (st.mode & 0o111) !== 0;
  if (st.uid === uid) return (st.mode & 0o100) !== 0;
  if (st.gid === uid) return (st.mode & 0o010) !== 0;
  return (st.mode & 0o001) !== 0;
}

/**
 * Why `program` (argv[0]) cannot be started in the view, or null when it can: a name without `/` searched in `PATH`
 * (execvp's rule: the first executable one wins; a file found but not executable is 126 when no other is), a path with
 * `/` taken from `cwd`.
 */
export function commandProblem(
  program: string,
  view: ViewMount[],
  opts: { path: string; cwd: string; uid: number | null },
): CommandProblem | null {
  if (program === '') return 'command_not_found';
  const candidates = program.includes('/')
    ? [path.posix.resolve(opts.cwd, program)]
    : opts.path.split(':').map((dir) => path.posix.resolve(opts.cwd, dir || '.', program));
  let found = false;
  for (const candidate of candidates) {
    const st = lookup(view, candidate);
    if (!st) continue;
    if (executable(st, opts.uid)) return null;
    found = true;
  }
  return found ? 'command_not_executable' : 'command_not_found';
}
