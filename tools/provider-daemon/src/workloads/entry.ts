/**
 * How a renter's program enters a running workload (`gpu exec`, `gpu shell`: reach/): the way `docker exec` does it,
 * into the workload's own namespaces and limits, never into the machine's.
 *
 * - **Sandbox**: `nsenter` joins the namespaces of the sandbox's first process (mount, PID, network, IPC, UTS, cgroup),
 *   its root and directory, and the nested user namespace it and the workload's processes are in (where no further
 *   user namespace can be made), with no capability, under the workload's `prlimit` limits and in its control
 *   group (the wrapper moves itself there before anything starts, so everything it starts is counted), with
 *   `no_new_privs`. So it sees the workload's files, GPUs and processes and nothing of the machine's (its network is
 *   the workload's: none, or slirp's, which never reaches the host's loopback). Bubblewrap made those namespaces in a
 *   user namespace of their own that no process is left in (every process of the sandbox is in the nested one), whose
 *   root is the workload's user. Entering first joins that owning user namespace, reached from the sandbox's network
 *   namespace (`NAMESPACES_OF`: the kernel's `NS_GET_USERNS`, asked by Perl, which every Debian has), as its root: a
 *   daemon that is not root (its workloads run as its own user) is that root already and keeps its credentials, a
 *   root daemon takes them (its workloads run as users of their own) with no group of root's. From there the rest, credentials kept: the same namespaces, the same user and groups as
 *   the workload's own processes. The owning namespace is opened while the workload's first process is known to be
 *   the one the daemon looked at (its start time checked after), and nothing it lets in reaches another's namespaces:
 *   the kernel may give that PID to another process by the time nsenter opens the others, and those are refused.
 *
 *   **Nothing of the sandbox's runs privileged.** Its root is the workload's view: a program started from it runs its
 *   dynamic loader (`/lib64`) and libraries from there. So the mount namespace and the root are joined in the same
 *   step as the nested user namespace, and that step takes the workload's credentials before it starts anything:
 *   every program started while a privilege lasts (a root daemon's, then that of the owning namespace's root) is the
 *   machine's own, from the machine's root. The sandbox's root is read-only besides (sandbox.ts), and `no_new_privs`
 *   holds from the first step.
 * - **Container**: the runtime's own `exec` into the session's container, as its user, in `/work`, its variables
 *   from a file the same way (runtime-env.ts), read through descriptor 3 by the runtime itself.
 *
 * The workload's variables (the renter's, possibly secrets) never pass through a process outside the sandbox (its
 * C library would read a renter's GCONV_PATH there), nor through a command line (`ps` shows those to every user of
 * the machine): the daemon writes them to a file in its own directory (0700; the file the workload user's, 0400), the wrapper
 * opens it as descriptor 3 and removes it, and a shell inside the sandbox reads them from `/dev/fd/3` before it runs the program.
 */
import { randomUUID } from 'node:crypto';
import { chownSync, mkdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { ProcessRef } from './processes.ts';
import { containerEnv } from './runtime-env.ts';

/** What the daemon knows of a running workload to enter it. */
export type Entry = (
  | {
      kind: 'sandbox';
      /** Its variables (the renter's and the platform's, PATH and HOME included). */
      env: Record<string, string>;
      /** Its `prlimit` options (`--nproc=...`). */
      limits: string[];
      /** The `cgroup.procs` files of its control group (none: it has none). */
      cgroupProcs: string[];
    }
  | { kind: 'container'; runtime: { path: string; args: readonly string[] }; name: string }
) & {
  /**
   * Its first process, whose namespaces are the workload's (a sandbox's: bwrap's init in its PID namespace; a
   * container's: its init), as itself (its PID and start time, as the daemon saw it start), once set up and while it
   * runs; null otherwise.
   */
  process: () => ProcessRef | null;
  /** The user ID it runs as (a root daemon's workloads: one of their own); absent: the daemon's. */
  uid?: number;
  /** Settles once the workload has ended (what was opened into it ends with it: reach/ports.ts). */
  ended: Promise<unknown>;
};

/** A program to run in the workload. */
export interface EntryRequest {
  argv: string[];
  /** Variables beside the workload's (TERM of a terminal). */
  env?: Record<string, string>;
  /** Whether it gets a terminal (the runtime's `-t` for a container; the caller makes the PTY for a sandbox). */
  tty: boolean;
}

/** A command line to spawn, with its own fixed environment. */
export interface EntryCommand {
  file: string;
  args: string[];
  env: Record<string, string>;
}

/** The PATH of the tools outside the workload (sh, prlimit, nsenter, the runtime). */
export const HELPERS_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The host-side wrapper: opens the variables' file as descriptor 3 and removes it, checks that the workload's first
 * process (its PID, then when it started: `/proc/<pid>/stat`'s 22nd field) is still the one the daemon looked at, moves
 * itself into the workload's control group (each `cgroup.procs` up to `--`), then becomes the rest of its arguments.
 * The check is the last thing before `nsenter` opens that PID's namespaces: the kernel gives a PID again once its
 * process is gone, and the namespaces of whatever runs under it then (another session's workload, the machine's own)
 * must never be entered.
 */
const WRAPPER = [
  'exec 3<"$1" || exit 126',
  'rm -f -- "$1"',
  'st=$(cat "/proc/$2/stat" 2>/dev/null) || { echo "gpu: the workload has ended" >&2; exit 126; }',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's own expansion (all after the last `) `)
  'st=${st##*) }',
  '[ "$(echo "$st" | cut -d" " -f20)" = "$3" ] || { echo "gpu: the workload has ended" >&2; exit 126; }',
  'shift 3',
  'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done',
  'shift',
  'exec "$@"',
].join('\n');

/** Opens the variables' file (its first argument) as descriptor 3, removes it, then becomes the rest. */
const OPEN_ENV = 'exec 3<"$1" || exit 126; rm -f -- "$1"; shift; exec "$@"';

/**
 * Inside the workload: its variables from descriptor 3 (and nothing of the daemon's), then the program, with neither
 * descriptor 3 nor 4 and 5 (the workload's namespaces, through which it entered: `NAMESPACES_OF`).
 */
const INNER = 'set -a; . /dev/fd/3; set +a; exec 3<&- 4<&- 5<&-; exec "$@"';

/** Where a command started by `NAMESPACES_OF` finds the user namespace owning the workload's network namespace. */
const OWNER_USERNS_FD = '/proc/self/fd/4';
/** Where a command started by `NAMESPACES_OF` finds the workload's network namespace. */
export const NET_FD = '/proc/self/fd/5';

/**
 * Gives the rest of its arguments the network namespace of the process its first two name (its PID and start time)
 * as descriptor 5, and the user namespace that owns it as descriptor 4, then becomes them. The owner comes from the
 * kernel's `NS_GET_USERNS` (`_IO(0xb7, 1)`, linux/nsfs.h), which neither Node nor util-linux 2.38's nsenter offers,
 * and the process's start time is checked once both are open: the descriptors are then that workload's, whatever
 * the kernel gives its PID afterwards. So a command that joins the network namespace through its descriptor joins
 * that workload's, and one that joins the owning user namespace (a sandbox's: bubblewrap's, whose root is the
 * workload's user) cannot join another's namespaces from there, by PID or otherwise.
 */
export const NAMESPACES_OF = [
  'use strict;',
  'my ($pid, $start) = splice(@ARGV, 0, 2);',
  'sub ended { print STDERR "gpu: the workload has ended\\n"; exit 126 }',
  'open(my $ns, "<", "/proc/$pid/ns/net") or ended();',
  'my $owner = ioctl($ns, 0xb701, 0);',
  'defined $owner or do { print STDERR "gpu: the workload cannot be entered: $!\\n"; exit 126 };',
  'open(my $stat, "<", "/proc/$pid/stat") or ended();',
  'my @fields = split(/ /, (<$stat> // "") =~ s/^.*\\) //sr);',
  '($fields[19] // "") eq $start or ended();',
  'require POSIX;',
  // Out of the way first (either may be on 4 or 5 already), then onto 4 and 5, open across the exec.
  'POSIX::dup2($owner, 100) // exit 126;',
  'POSIX::dup2(fileno($ns), 101) // exit 126;',
  'my @kept;',
  'for my $i (0, 1) {',
  '  POSIX::dup2(100 + $i, 4 + $i) // exit 126;',
  '  POSIX::close(100 + $i);',
  '  open(my $fd, "<&=", 4 + $i) or exit 126;',
  '  fcntl($fd, 2, 0) or exit 126;',
  '  push @kept, $fd;',
  '}',
  'exec { $ARGV[0] } @ARGV or do { print STDERR "gpu: $ARGV[0]: $!\\n"; exit 126 };',
].join('\n');

/** The start of a command line given the namespaces of the workload's first process `first` (`NAMESPACES_OF`). */
export function withNamespacesOf(first: ProcessRef): string[] {
  return ['perl', '-e', NAMESPACES_OF, String(first.pid), first.start];
}

/**
 * The start of a command line run in the sandbox's owning user namespace: `NAMESPACES_OF` for `first`, then `nsenter`
 * joining that namespace; the caller adds nsenter's other options, `--`, and the program.
 */
export function inOwnerNamespace(first: ProcessRef): string[] {
  return [...withNamespacesOf(first), 'nsenter', `--user=${OWNER_USERNS_FD}`];
}

/**
 * The start of a command line run in the network namespace of the workload's first process `first`, joined by the
 * descriptor `NAMESPACES_OF` holds, never by its PID: a root daemon's as root, another's from the sandbox's owning user
 * namespace (bubblewrap made the network namespace there), credentials kept. The caller adds the program.
 */
export function inWorkloadNetwork(first: ProcessRef): string[] {
  const own = process.getuid?.() === 0 ? [] : [`--user=${OWNER_USERNS_FD}`, '--preserve-credentials'];
  return [...withNamespacesOf(first), 'nsenter', ...own, `--net=${NET_FD}`, '--'];
}

/** Whether the workload's process has a cgroup namespace of its own (bwrap makes one where the kernel lets it). */
function ownCgroupNamespace(pid: number): boolean {
  try {
    return readlinkSync(`/proc/${pid}/ns/cgroup`) !== readlinkSync('/proc/self/ns/cgroup');
  } catch {
    return true;
  }
}

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The variables as shell assignments (single-quoted: nothing in a value is expanded). */
export function shellAssignments(env: Record<string, string>): string {
  return Object.entries(env)
    .filter(([k]) => NAME.test(k))
    .map(([k, v]) => `${k}='${v.replaceAll("'", "'\\''")}'\n`)
    .join('');
}

/**
 * The workload's own process (bubblewrap's init's first child: bubblewrap starts it in a user namespace nested in
 * the sandbox's, where no further one can be made) as the sandbox's PID namespace numbers it; null when it has none.
 */
export function workloadInnerPid(init: number): number | null {
  try {
    const child = readFileSync(`/proc/${init}/task/${init}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)[0];
    // Not yet its program (bwrap still setting its user namespace up): none to enter yet.
    if (!child || readFileSync(`/proc/${child}/comm`, 'utf8').trim() === 'bwrap') return null;
    const line = readFileSync(`/proc/${child}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('NSpid:'));
    const inner = Number(line?.trim().split(/\s+/).at(-1));
    return Number.isInteger(inner) && inner > 0 ? inner : null;
  } catch {
    return null;
  }
}

/**
 * The workload cannot be entered yet: its sandbox is still being set up (bubblewrap making its namespaces), for a
 * moment after its workload was reported running. Asked again a little later, it can.
 */
export class EntryNotReady extends Error {}

/**
 * The command that runs `request` in the workload; `dir` is the daemon's own directory for the variables' file.
 * Throws when the workload is not set up yet.
 */
export function entryCommand(entry: Entry, request: EntryRequest, dir: string): EntryCommand {
  if (entry.kind === 'container') {
    const env = containerEnv(request.env ?? {});
    const args = (envFile: string[]) => [
      ...entry.runtime.args,
      'exec',
      '--interactive',
      ...(request.tty ? ['--tty'] : []),
      ...(entry.uid !== undefined ? ['--user', `${entry.uid}:${entry.uid}`] : []),
      '--workdir',
      '/work',
      ...envFile,
      ...env.args,
      entry.name,
      ...request.argv,
    ];
    if (!env.file) return { file: entry.runtime.path, args: args([]), env: { PATH: HELPERS_PATH } };
    // The runtime reads the variables from descriptor 3: the file is gone before it starts.
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const file = path.join(dir, `env-${randomUUID()}`);
    writeFileSync(file, env.file, { mode: 0o400 });
    return {
      file: '/bin/sh',
      args: ['-c', OPEN_ENV, 'enter', file, entry.runtime.path, ...args(['--env-file', '/dev/fd/3'])],
      env: { PATH: HELPERS_PATH },
    };
  }
  const first = entry.process();
  if (first === null) throw new EntryNotReady('the workload is not set up yet');
  // Its start time as the daemon saw it start, never read again: what the wrapper and NAMESPACES_OF check.
  const { pid: init, start: started } = first;
  const inner = workloadInnerPid(init);
  const root = process.getuid?.() === 0;
  // A root daemon's workloads run as users of their own; another's as the daemon's own user.
  if (root !== (entry.uid !== undefined)) {
    throw new Error('the workload runs as another user than this daemon would enter it as');
  }
  if (inner === null) throw new EntryNotReady('the workload has no process to enter');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = path.join(dir, `env-${randomUUID()}`);
  writeFileSync(file, shellAssignments({ ...entry.env, ...request.env }), { mode: 0o400 });
  // The shell inside reads it again through /dev/fd/3 as the workload's user (its own variables; gone at once).
  if (entry.uid !== undefined) chownSync(file, entry.uid, entry.uid);
  // The program inside, started by the last step: the sandbox's root is the workload's, and what runs from it (its
  // dynamic loader, its libraries) runs only once nothing of the daemon's privilege is left.
  const program = ['/usr/bin/setpriv', '--inh-caps=-all', '--', '/bin/sh', '-c', INNER, 'sh', ...request.argv];
  // Each step runs a program of the machine's (the mount namespace, and the sandbox's root, are joined last, in the
  // same step as the workload's own user namespace and user), with no new privileges from the first. First the
  // sandbox's owning user namespace (descriptor 4, anchored to this workload), alone: a daemon that is not root keeps
  // its credentials (its user is that namespace's root), a root daemon takes that root's (nsenter's default there),
  // with no group of root's. From there, only this workload's namespaces can be joined, whatever process holds the
  // PID by the time nsenter opens them (joined with the others in one step, a root daemon's nsenter would open and
  // join those first: util-linux tries them before the user namespace). Then its namespaces but the mount one (the
  // network one by its descriptor, 5); then the mount namespace, the root and the nested user namespace,
  // credentials kept: the same user and groups as the workload's own processes.
  const steps = [
    'setpriv',
    ...(root ? ['--clear-groups'] : []),
    '--no-new-privs',
    '--',
    ...inOwnerNamespace(first),
    ...(root ? [] : ['--preserve-credentials']),
    '--',
    'nsenter',
    `--target=${init}`,
    '--pid',
    `--net=${NET_FD}`,
    '--ipc',
    '--uts',
    ...(ownCgroupNamespace(init) ? ['--cgroup'] : []),
    '--preserve-credentials',
    '--',
    '/usr/bin/nsenter',
    `--target=${init}`,
    '--mount',
    '--user',
    '--root',
    '--wd',
    '--preserve-credentials',
    '--',
  ];
  return {
    file: '/bin/sh',
    args: [
      '-c',
      WRAPPER,
      'enter',
      file,
      String(init),
      started,
      ...entry.cgroupProcs,
      '--',
      'prlimit',
      ...entry.limits,
      '--',
      ...steps,
      ...program,
    ],
    env: { PATH: HELPERS_PATH },
  };
}
