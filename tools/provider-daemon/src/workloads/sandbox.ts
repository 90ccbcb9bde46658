/**
 * A renter's workload in a bubblewrap sandbox (Debian's `bubblewrap`, `bwrap`): the command (an argv array, never a
 * shell string) in namespaces of its own (user, PID, IPC, UTS, cgroup, mount, network: with `network` in its spec, a
 * user-mode network out through slirp4netns that cannot reach the host's loopback; without, none at all), with
 *
 * - a read-only view of the host's userland (`/usr`, its `/bin`, `/lib*`, `/sbin` links or directories, `/etc`
 *   without the daemon's own files, `/sys` without the machine's control groups and network interfaces: its own
 *   control group alone at `/sys/fs/cgroup`), a fresh `/proc` (whose first process, bwrap, shows neither the daemon's
 *   variables nor a host path), a minimal `/dev`, its own `/tmp` and its work directory at `/work` (its current
 *   directory and `HOME`), both on its disk (disk.ts: a filesystem of its own, so the kernel holds it to its
 *   allowance), with its inputs read-only at `/work/inputs` (files.ts fetched them) and `/work/output/`, what is
 *   uploaded at its end;
 * - **only the leased GPUs' device nodes** (`/dev/nvidia<minor>` of each leased GPU, and the driver's control nodes
 *   that exist: `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`), and `CUDA_VISIBLE_DEVICES` and
 *   `NVIDIA_VISIBLE_DEVICES` naming the leased GPUs by UUID (an index would mean another GPU inside, where only the
 *   leased ones exist);
 * - limits: processes (`RLIMIT_NPROC`, counted per user: a daemon that runs as root gives each workload a user ID of
 *   its own, so a fork bomb exhausts only its own allowance), open files (`RLIMIT_NOFILE`), the size of one file
 *   (`RLIMIT_FSIZE`), and, watched every second, the memory its processes hold (resident) and whether its disk is
 *   full: past either it is stopped with reason `memory_limit` or `disk_limit`; with a control group (cgroups.ts),
 *   the kernel's limits on its memory and processes as well;
 * - a command that is not there to run (checked in its own view before anything starts: command.ts) never starts:
 *   it fails, `command_not_found` or `command_not_executable`, and nothing is billed;
 * - at most `max_runtime_seconds`: then it is stopped with reason `max_runtime`;
 * - `--die-with-parent`: a daemon that dies (even `kill -9`) takes its workloads with it, as far as the parent-death
 *   signal of their first process holds (it may not: bwrap's own setup, or a workload that clears it); its next start
 *   kills whatever first process of a sandbox the previous life left (the runner's journal, `initOf`).
 *
 * Stopping a workload sends SIGTERM to every process of it, then, after the grace period, SIGKILL to bwrap and to the
 * sandbox's first process, whose PID namespace ends with it: no process of the workload is left. Its standard output
 * and error go to files outside the sandbox, each cut at `logBytes` (what is cut is counted, and said at the end of the file).
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  createWriteStream,
  existsSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  type WriteStream,
  writeFileSync,
} from 'node:fs';
import { networkInterfaces } from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { type WorkloadSpec, workloadSpecSchema } from '@gpu/common';
import type { WorkloadCgroup } from './cgroups.ts';
import type { ViewMount } from './command.ts';
import type { SessionDisk } from './disk.ts';
import { type Entry, inOwnerNamespace, inWorkloadNetwork, NET_FD, withNamespacesOf } from './entry.ts';
import { type ProcessRef, pidWhileRunning, processRef, running } from './processes.ts';

/** A leased GPU as the sandbox gives it: its UUID and the host's device node. */
export interface SandboxGpu {
  uuid: string;
  /** The device node on the host (`/dev/nvidia3`, or a simulated machine's stand-in file). */
  device: string;
}

interface SandboxLimits {
  processes: number;
  openFiles: number;
  /** Resident memory of all its processes together. */
  memoryBytes: number;
  /** What its disk (its work directory and its `/tmp`) may hold: bytes (one file too, `RLIMIT_FSIZE`), and files. */
  diskBytes: number;
  diskFiles: number;
  /** Each of its standard output and error files. */
  logBytes: number;
}

export interface SandboxOptions {
  spec: WorkloadSpec;
  /** Its work directory (bound at `/work`; made beforehand, its user's) and `/tmp`, and whether they are full. */
  disk: SessionDisk;
  /** Where `stdout.log` and `stderr.log` are written (never inside the sandbox). */
  logDir: string;
  /** A host directory of the workload's inputs, bound read-only at `/work/inputs` (none: no inputs). */
  inputsDir?: string;
  gpus: SandboxGpu[];
  /** The driver's control nodes to bind (those of a real machine that exist). */
  controlDevices: string[];
  limits: SandboxLimits;
  /** The user and group ID it runs as (a daemon running as root: one of its own); absent: the daemon's. */
  uid?: number;
  /** Host paths that must not be seen inside even where their directory is bound (credentials, state). */
  hidden: string[];
  /** Variables the platform sets (`GPU_PLATFORM_SESSION_ID`). */
  platformEnv: Record<string, string>;
  stopGraceMs: number;
  bwrapPath?: string;
  /** The user-mode network of a workload with `network` (Debian's `slirp4netns`). */
  slirpPath?: string;
  /** Its control group (cgroups.ts): the kernel's limits on its memory and processes; none: the watch alone. */
  cgroup?: WorkloadCgroup;
}

/** How a workload ended. */
export type SandboxEnd =
  | { state: 'exited'; exitCode: number; at: Date }
  | { state: 'stopped'; reason: string; exitCode: number | null; signal: string | null; at: Date }
  | { state: 'failed'; reason: string; at: Date };

/** A running sandbox. */
export interface Sandbox {
  /** When the sandbox was set up (and its network up) and the workload started; rejects when it never was. */
  readonly ready: Promise<Date>;
  /** The host PID of its `bwrap` process. */
  readonly pid: number;
  readonly startedAt: Date;
  /** Resolves once every process of it is gone. */
  readonly ended: Promise<SandboxEnd>;
  /**
   * SIGTERM to its processes, SIGKILL after the grace period (`graceMs`: this stop's own, a preemption's deadline;
   * else the daemon's `stop_grace`); resolves once they are all gone.
   */
  stop(reason: string, graceMs?: number): Promise<SandboxEnd>;
  /** How a renter's program enters it (entry.ts). */
  readonly entry: Entry;
}

export const SANDBOX_PATH = '/usr/local/bin:/usr/bin:/bin';
/** slirp4netns's DNS forwarder inside the workload's network (its default 10.0.2.0/24). */
const SLIRP_DNS = '10.0.2.3';
export const WATCH_MS = 1000;

/** The host's userland, read-only: `/usr`, and `/bin`, `/lib*`, `/sbin` as links (merged /usr) or directories. */
function userland(): string[] {
  const args = ['--ro-bind', '/usr', '/usr'];
  for (const top of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']) {
    const host = `/${top}`;
    let stat: ReturnType<typeof lstatSync>;
    try {
      stat = lstatSync(host);
    } catch {
      continue;
    }
    if (stat.isSymbolicLink()) args.push('--symlink', path.relative('/', realTarget(host)), host);
    else if (stat.isDirectory()) args.push('--ro-bind', host, host);
  }
  return args;
}

/** Where a top-level link points (`usr/bin` or `/usr/bin`), as an absolute path. */
function realTarget(link: string): string {
  return path.resolve('/', readlinkSync(link));
}

/** The file descriptor bwrap reads its arguments from (`--args`): a pipe, never its command line. */
const ARGS_FD = 5;
/** The descriptors of the workload's own `/etc/passwd` and `/etc/group` (`--ro-bind-data`). */
const PASSWD_FD = 6;
const GROUP_FD = 7;

/**
 * Who's who inside: root, nobody and the workload's own user (`workload`, at home in `/work`), not the machine's
 * accounts. Programs that look their user up (`sftp-server`, which `scp` runs; `ssh`, Python's `getpass`, git) find
 * it.
 */
function identityFiles(opts: SandboxOptions): { passwd: string; group: string } {
  const uid = opts.uid ?? process.getuid?.() ?? 65534;
  return {
    passwd:
      'root:x:0:0:root:/root:/usr/sbin/nologin\n' +
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' +
      (uid === 0 || uid === 65534 ? '' : `workload:x:${uid}:${uid}:workload:/work:/bin/sh\n`),
    group: `root:x:0:\nnobody:x:65534:\n${uid === 0 || uid === 65534 ? '' : `workload:x:${uid}:\n`}`,
  };
}

/**
 * Every argument of bwrap (NUL-separated on `ARGS_FD`), the workload's environment among them: every variable
 * cleared, then the workload's set. So the renter's variables reach the workload only: prlimit, setpriv and bwrap,
 * which run outside the sandbox, start with a fixed PATH alone (a renter's GCONV_PATH, LOCPATH or MALLOC_* never
 * reaches their C library); no value and no host path is in a process's command line (`ps` shows them to every user
 * of the machine; the workload sees bwrap's, its first process, as `bwrap --args 5 -- <its own argv>`).
 */
function argsPipe(opts: SandboxOptions): Buffer {
  const env = ['--clearenv', ...Object.entries(sandboxEnv(opts)).flatMap(([k, v]) => ['--setenv', k, v])];
  return Buffer.from(`${[...env, ...bwrapArgs(opts)].join('\0')}\0`);
}

/** The PATH of the tools that start the sandbox (prlimit, setpriv, bwrap), and of bwrap, its first process. */
const HELPERS_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * What the sandbox shows of `/sys` (bound read-only): not the machine's control groups (every session's, with their
 * memory), its network interfaces nor its block devices (the other sessions' disk images); its own control group,
 * when it has one, at `/sys/fs/cgroup`.
 */
function sysArgs(opts: SandboxOptions): string[] {
  if (!existsSync('/sys')) return [];
  const args = ['--ro-bind', '/sys', '/sys', '--tmpfs', '/sys/fs/cgroup'];
  for (const [inside, host] of opts.cgroup?.views() ?? []) args.push('--ro-bind', host, inside);
  args.push('--remount-ro', '/sys/fs/cgroup');
  // The interfaces' directories (`/sys/class/net` and where each entry leads, under /sys/devices).
  const hidden = new Set(['/sys/class/net', '/sys/devices/virtual/net']);
  // Nor its block devices: every session's disk image is a loop device there, its backing file naming the session
  // and the daemon's run directory.
  for (const dir of ['/sys/block', '/sys/class/block', '/sys/devices/virtual/block']) hidden.add(dir);
  try {
    for (const name of readdirSync('/sys/class/net')) {
      hidden.add(path.dirname(path.resolve('/sys/class/net', readlinkSync(path.join('/sys/class/net', name)))));
    }
  } catch {
    // No network class: nothing to hide.
  }
  for (const dir of hidden) if (existsSync(dir)) args.push('--tmpfs', dir, '--remount-ro', dir);
  return args;
}

/** The places a sandbox binds, as command.ts reads them: where a path inside it is on the host. */
export function sandboxView(opts: Pick<SandboxOptions, 'disk' | 'inputsDir'>): ViewMount[] {
  const view: ViewMount[] = [
    { inside: '/usr', host: '/usr' },
    { inside: '/etc', host: '/etc' },
    { inside: '/work', host: opts.disk.workDir },
  ];
  for (const top of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'])
    view.push({ inside: `/${top}`, host: `/${top}` });
  if (opts.inputsDir) view.push({ inside: '/work/inputs', host: opts.inputsDir });
  if (opts.disk.tmpDir) view.push({ inside: '/tmp', host: opts.disk.tmpDir });
  return view;
}

/** The arguments of `bwrap` for the workload. */
function bwrapArgs(opts: SandboxOptions): string[] {
  const args = [
    '--unshare-user',
    // No user namespace of its own inside: the kernel's namespace-only surfaces (nftables, overlayfs) stay closed.
    '--disable-userns',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    // Always a network namespace of its own: with `network`, slirp4netns gives it a way out (startNetwork).
    '--unshare-net',
    '--die-with-parent',
    '--new-session',
    '--hostname',
    'workload',
    ...userland(),
    '--ro-bind',
    '/etc',
    '/etc',
    '--ro-bind-data',
    String(PASSWD_FD),
    '/etc/passwd',
    '--ro-bind-data',
    String(GROUP_FD),
    '/etc/group',
    ...sysArgs(opts),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    // Its /tmp on its disk, or beside its watched work directory (counted with it); a tmpfs of its byte allowance
    // for a disk without one.
    ...(opts.disk.tmpDir
      ? ['--bind', opts.disk.tmpDir, '/tmp']
      : ['--size', String(opts.limits.diskBytes), '--tmpfs', '/tmp']),
    '--bind',
    opts.disk.workDir,
    '/work',
    // Its inputs, read-only, inside its work directory.
    ...(opts.inputsDir ? ['--ro-bind', opts.inputsDir, '/work/inputs'] : []),
    '--chdir',
    '/work',
  ];
  for (const hidden of opts.hidden) {
    if (hidden.startsWith('/etc/') && existsSync(hidden)) args.push('--ro-bind', '/dev/null', hidden);
  }
  // bwrap says on fd 3 that the sandbox is set up (its child's PID): the workload runs from then.
  args.push('--info-fd', '3');
  if (opts.spec.network) {
    // It waits on fd 4 until the network is up; names resolve through slirp's forwarder (the host's resolver may
    // listen on its loopback, which the workload cannot reach).
    args.push('--ro-bind', resolvConf(opts), '/etc/resolv.conf', '--block-fd', '4');
  }
  for (const device of opts.controlDevices) args.push('--dev-bind', device, device);
  opts.gpus.forEach((gpu) => {
    const inside = `/dev/${path.basename(gpu.device)}`;
    args.push(isCharDevice(gpu.device) ? '--dev-bind' : '--bind', gpu.device, inside);
  });
  // Its /dev read-only once every device is in (bwrap's is a tmpfs of half the machine's memory, writable by the
  // workload: memory no watch of resident memory sees), and its /dev/shm a tmpfs of its memory allowance.
  args.push('--size', String(opts.limits.memoryBytes), '--tmpfs', '/dev/shm', '--remount-ro', '/dev');
  // Its root read-only last (bwrap's is a tmpfs the workload's user owns): what it holds (the links /bin, /lib and
  // /lib64 to /usr, the mount points) is the machine's to say. A program entering the workload (entry.ts) starts from
  // this root: with it writable, a workload could put a dynamic loader of its own at /lib64 for it.
  args.push('--remount-ro', '/');
  return args;
}

/**
 * The addresses a workload's network never reaches, beside the host's loopback (which slirp4netns keeps out): the
 * private and link-local ranges (the provider's own network, a cloud's metadata service at 169.254.169.254, carrier
 * NAT) and the host's own addresses. slirp's own network (10.0.2.0/24: its gateway and DNS forwarder) is more
 * specific than 10.0.0.0/8 and stays reachable.
 */
const FENCED = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16', '100.64.0.0/10'];

/**
 * Routes the fenced addresses to nowhere in the workload's network namespace (`ip`, through the descriptor entry.ts's
 * `NAMESPACES_OF` opened while the PID was the workload's). A daemon that is not root joins the sandbox's owning user
 * namespace first, as entering does: bubblewrap made the network namespace there, where the daemon's user is root.
 */
export async function fenceNetwork(first: ProcessRef): Promise<void> {
  const own = Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && a.family === 'IPv4' && !a.internal)
    .map((a) => `${a!.address}/32`);
  const [command, ...args] = [...inWorkloadNetwork(first), 'ip', '-batch', '-'];
  const { status, stderr } = spawnSync(command!, args, {
    input: [...FENCED, ...own].map((cidr) => `route add unreachable ${cidr}\n`).join(''),
  });
  if (status !== 0) throw new Error(`fencing failed: ${String(stderr).trim()}`);
}

/** The PID bwrap says on its info fd once the sandbox is set up (it closes the fd without one when setup failed). */
async function sandboxPid(info: Readable): Promise<number> {
  let text = '';
  for await (const chunk of info) {
    text += String(chunk);
    if (text.includes('}')) break;
  }
  if (!text.includes('}')) throw new Error('bwrap could not set the sandbox up');
  return (JSON.parse(text.slice(0, text.indexOf('}') + 1)) as { 'child-pid': number })['child-pid'];
}

/** The resolver configuration of a workload with network: slirp4netns's DNS forwarder. */
function resolvConf(opts: SandboxOptions): string {
  const file = path.join(path.dirname(opts.logDir), 'resolv.conf');
  writeFileSync(file, `nameserver ${SLIRP_DNS}\n`, { mode: 0o644 });
  return file;
}

/**
 * Gives the sandbox's network namespace a way out: slirp4netns (user-mode networking, as rootless containers use)
 * with a tap device, NAT to the host's network, and `--disable-host-loopback`, so that the workload reaches the
 * internet and never the host's loopback services (the platform's, a database). It exits with the sandbox, or with
 * the daemon (its exit pipe closes). Resolves once it is up, after which the sandbox may start.
 */
async function startNetwork(first: ProcessRef, block: Writable, slirp: string): Promise<{ stop(): void }> {
  const slirpArgs = [
    '--configure',
    '--mtu=65520',
    '--disable-host-loopback',
    // It parses the workload's packets: in a sandbox of its own, with a seccomp filter.
    '--enable-sandbox',
    '--enable-seccomp',
    '--ready-fd=3',
    '--exit-fd=6',
    // By path, through the descriptor `NAMESPACES_OF` opened (entry.ts): through the process, it would join the
    // process's user namespace first, bubblewrap's nested one, from which the network namespace (made in the
    // sandbox's owning one) cannot be joined.
    '--netns-type=path',
    NET_FD,
    'tap0',
  ];
  // A daemon that is not root starts it in the sandbox's owning user namespace, where its user is root: the network
  // namespace is that namespace's to join. A root daemon's is root's (the tap device is root's to open).
  const [command, ...args] =
    process.getuid?.() === 0
      ? [...withNamespacesOf(first), slirp, ...slirpArgs]
      : [...inOwnerNamespace(first), '--preserve-credentials', '--', slirp, ...slirpArgs];
  // Descriptors 4 and 5 stay free: the workload's namespaces, given by `NAMESPACES_OF`.
  const net = spawn(command!, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'ignore', 'ignore', 'pipe'] });
  const failed = once(net, 'error').then(([err]) => {
    throw err as Error;
  });
  let said = '';
  (net.stdio[2] as Readable).on('data', (d) => {
    said = `${said}${String(d)}`.slice(-500);
  });
  const exited = once(net, 'exit').then(() => {
    throw new Error(`slirp4netns exited before the network was up: ${said.trim()}`);
  });
  const ready = once(net.stdio[3] as Readable, 'data');
  await Promise.race([ready, failed, exited]);
  await fenceNetwork(first);
  block.end('1');
  return { stop: () => net.kill('SIGTERM') };
}

function isCharDevice(p: string): boolean {
  try {
    return lstatSync(p).isCharacterDevice();
  } catch {
    return false;
  }
}

/** The sandbox's whole environment: the renter's, then the platform's (which the spec may not name). */
function sandboxEnv(opts: SandboxOptions): Record<string, string> {
  return { ...workloadEnv(opts), PATH: SANDBOX_PATH };
}

/**
 * A workload's variables in either mode: the renter's, then the platform's (which the spec may not name): its home
 * and temporary directory, and its GPUs by UUID. The sandbox adds its PATH; a container keeps its image's.
 */
export function workloadEnv(opts: Pick<SandboxOptions, 'spec' | 'platformEnv'> & { gpus: SandboxGpu[] }) {
  const uuids = opts.gpus.map((g) => g.uuid).join(',');
  return {
    ...opts.spec.env,
    ...opts.platformEnv,
    HOME: '/work',
    TMPDIR: '/tmp',
    CUDA_VISIBLE_DEVICES: uuids,
    NVIDIA_VISIBLE_DEVICES: uuids,
  };
}

/** The first process of a sandbox's workload while it runs (none for a container: its runtime has its own). */
export function initOf(sandbox: Pick<Sandbox, 'entry'>): ProcessRef | null {
  if (sandbox.entry.kind !== 'sandbox') return null;
  return sandbox.entry.process();
}

/**
 * Kills the sandboxes whose first processes an earlier life of the daemon noted (`initOf`) and that still run (the
 * same processes: their PIDs and start times); their PID namespaces end with them. The PIDs of those killed.
 */
export function killLeftSandboxes(inits: ProcessRef[]): number[] {
  const killed: number[] = [];
  for (const ref of inits) {
    const pid = pidWhileRunning(ref);
    if (pid === null) continue;
    try {
      process.kill(pid, 'SIGKILL');
      killed.push(pid);
    } catch {
      // Gone meanwhile, or another user's (not the daemon's to end).
    }
  }
  return killed;
}

/** Which of its limits a workload's processes and disk are at or past, if any (the daemon's watch). */
export function limitReached(
  pids: number[],
  disk: Pick<SessionDisk, 'full'>,
  limits: Pick<SandboxLimits, 'memoryBytes'>,
): 'memory_limit' | 'disk_limit' | null {
  if (residentBytes(pids) > limits.memoryBytes) return 'memory_limit';
  if (disk.full()) return 'disk_limit';
  return null;
}

/**
 * Copies a stream into a file, cutting it at `limit` bytes and saying at the end how much was cut. A file that cannot
 * be written (the machine's disk full) keeps what it has: the rest is read and dropped, never an error that would
 * take the daemon, and every workload of the machine, down.
 */
export function boundedCopy(from: Readable, file: string, limit: number): Promise<void> {
  // Made before the workload starts: a reader finds the file from the first moment.
  const out: WriteStream = createWriteStream(file, { fd: openSync(file, 'w', 0o640) });
  let written = 0;
  let cut = 0;
  let broken = false;
  out.on('error', () => {
    broken = true;
  });
  from.on('data', (chunk: Buffer) => {
    const room = broken ? 0 : limit - written;
    if (room > 0) {
      const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
      out.write(part);
      written += part.length;
    }
    cut += Math.max(0, chunk.length - Math.max(0, room));
  });
  return new Promise((resolve) => {
    from.on('end', () => {
      if (broken) {
        out.destroy();
        resolve();
        return;
      }
      if (cut > 0) out.write(`\n[output cut: ${cut} more bytes not kept]\n`);
      out.end(() => resolve());
    });
  });
}

/** The PIDs whose parent chain leads to `root` (read from /proc), `root` excluded. */
export function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parent.set(Number(entry), Number(fields[1]));
    } catch {
      // Gone meanwhile.
    }
  }
  const out: number[] = [];
  for (const pid of parent.keys()) {
    let p = parent.get(pid);
    for (let depth = 0; p !== undefined && p > 1 && depth < 64; depth++) {
      if (p === root) {
        out.push(pid);
        break;
      }
      p = parent.get(p);
    }
  }
  return out;
}

/** `wanted`, or the daemon's own hard limit of that name when lower (a container's root may not raise it either). */
export function withinHard(name: string, wanted: number): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith(name));
    const hard = line?.slice(name.length).trim().split(/\s+/)[1];
    return hard && hard !== 'unlimited' ? Math.min(wanted, Number(hard)) : wanted;
  } catch {
    return wanted;
  }
}

/** Waits until none of the processes runs, at most `ms`. */
export async function allGone(pids: number[], ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (pids.some(running) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

/** Resident bytes of the processes. */
function residentBytes(pids: number[]): number {
  const page = 4096;
  let total = 0;
  for (const pid of pids) {
    try {
      total += Number(readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ')[1]) * page;
    } catch {
      // Gone meanwhile.
    }
  }
  return total;
}

/**
 * Starts the workload; throws when its spec is not one the platform accepts (it is checked again here: the daemon
 * trusts nothing that reached it).
 */
export function startSandbox(opts: SandboxOptions): Sandbox {
  const spec = workloadSpecSchema.parse(opts.spec);
  if (spec.image || !spec.command) throw new Error('an image runs in a container, not in the sandbox');
  const options = { ...opts, spec };
  const bwrap = opts.bwrapPath ?? 'bwrap';
  // Limits are set while still the daemon, within its own hard limits.
  const limits = [
    `--nproc=${withinHard('Max processes', opts.limits.processes)}`,
    `--nofile=${withinHard('Max open files', opts.limits.openFiles)}`,
    `--fsize=${withinHard('Max file size', opts.limits.diskBytes)}`,
  ];
  // prlimit and setpriv exec into bwrap: bwrap's parent is the daemon, which --die-with-parent watches.
  const asUser =
    opts.uid === undefined
      ? []
      : ['setpriv', `--reuid=${opts.uid}`, `--regid=${opts.uid}`, '--clear-groups', '--inh-caps=-all', '--'];
  // bwrap takes its options from the pipe, and the workload's own argv (nothing of the host's) on its command line.
  const argv = ['prlimit', ...limits, '--', ...asUser, bwrap, '--args', String(ARGS_FD), '--', ...spec.command];
  const startedAt = new Date();
  const child = spawn(argv[0]!, argv.slice(1), {
    // The helpers' own environment: a fixed PATH only (the workload's comes through ARGS_FD).
    env: { PATH: HELPERS_PATH },
    stdio: ['ignore', 'pipe', 'pipe', 'pipe', spec.network ? 'pipe' : 'ignore', 'pipe', 'pipe', 'pipe'],
    cwd: '/',
  });
  // Into its control group before bwrap reads its arguments (it waits for them): everything it starts is inside.
  if (opts.cgroup && child.pid) {
    try {
      opts.cgroup.add(child.pid);
    } catch (err) {
      process.emitWarning(`a workload runs without its control group: ${(err as Error).message}`);
    }
  }
  const argsIn = (child.stdio as unknown as Writable[])[ARGS_FD]!;
  // A bwrap that exits before reading it (not installed, refused) resets the pipe: that is its exit, not an error.
  argsIn.on('error', () => {});
  argsIn.end(argsPipe(options));
  const identity = identityFiles(options);
  for (const [fd, text] of [
    [PASSWD_FD, identity.passwd],
    [GROUP_FD, identity.group],
  ] as const) {
    const pipe = (child.stdio as unknown as Writable[])[fd]!;
    pipe.on('error', () => {});
    pipe.end(text);
  }
  const logs = Promise.all([
    boundedCopy(child.stdout!, path.join(opts.logDir, 'stdout.log'), opts.limits.logBytes),
    boundedCopy(child.stderr!, path.join(opts.logDir, 'stderr.log'), opts.limits.logBytes),
  ]);
  /** Why it could not start, when it could not (its network did not come up). */
  let failure: string | undefined;
  let network: { stop(): void } | undefined;
  /** The host PID of its first process, once bwrap has set it up (the one a renter's program enters). */
  let init: ProcessRef | null = null;
  // Running once bwrap has set the sandbox up (and, with `network`, once its network is up); failed before that.
  const ready: Promise<Date> = (async () => {
    const pid = await sandboxPid(child.stdio[3] as Readable);
    init = processRef(pid);
    if (spec.network) {
      try {
        if (init === null) throw new Error('the sandbox ended before its network was up');
        network = await startNetwork(init, child.stdio[4] as Writable, opts.slirpPath ?? 'slirp4netns');
      } catch (err) {
        failure = 'network_unavailable';
        process.emitWarning(`a workload's network did not come up: ${(err as Error).message}`);
        child.kill('SIGKILL');
        throw err;
      }
    }
    return new Date();
  })();
  ready.catch(() => {
    failure ??= 'sandbox_unavailable';
  });
  let stopping: { reason: string } | undefined;
  /** Its processes (bwrap's outside the sandbox excepted): its control group's, else those descending from bwrap. */
  const processesOf = (pid: number) => (opts.cgroup ? opts.cgroup.procs().filter((p) => p !== pid) : descendants(pid));
  /** Its processes as last seen (every watch, and at a stop). */
  let known: number[] = [];
  let killTimer: NodeJS.Timeout | undefined;

  /**
   * Kills bwrap and its first process, the sandbox's PID namespace with it. The first process by itself: its
   * parent-death signal alone does not hold (measured: killing bwrap left a sandbox of `sleep infinity` running, and a
   * workload can clear the signal of that process of its own user), and a process of it that ignores SIGTERM
   * would outlive its stop.
   */
  const killAll = () => {
    child.kill('SIGKILL');
    const pid = pidWhileRunning(init);
    if (pid === null) return;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  };
  child.once('exit', () => {
    // The network's block pipe is the daemon's to close once the sandbox is gone ('close' waits for every pipe).
    child.stdio[4]?.destroy();
    // bwrap gone (killed by anyone, or ended), its first process goes too: that one's parent-death signal does not
    // hold, and its output pipes would keep the sandbox from ending.
    killAll();
  });
  const closed = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
  const failedToStart = once(child, 'error').then(([err]) => err as Error);
  const ended: Promise<SandboxEnd> = Promise.race([
    closed.then(async ([code, signal]): Promise<SandboxEnd> => {
      await logs;
      await ready.catch(() => {});
      // Its PID namespace ended with its first process (killed with bwrap, below); the kernel kills what was left in
      // it: ended means gone.
      await allGone(known, 2000);
      const at = new Date();
      // It failed, and the kernel killed a process of it at its control group's memory limit: that was why.
      const oom = !stopping && (signal !== null || code !== 0) && (opts.cgroup?.oomKilled() ?? false);
      try {
        opts.cgroup?.remove();
      } catch {
        // A process of it still exiting: left for the next life to make anew.
      }
      if (failure) return { state: 'failed', reason: failure, at };
      if (stopping) return { state: 'stopped', reason: stopping.reason, exitCode: code, signal, at };
      if (oom) return { state: 'stopped', reason: 'memory_limit', exitCode: code, signal, at };
      // Its writes failed for want of room (ENOSPC) and it ended before the watch looked: that was its end.
      if (opts.disk.full()) return { state: 'stopped', reason: 'disk_limit', exitCode: code, signal, at };
      if (signal) return { state: 'stopped', reason: `signal ${signal}`, exitCode: null, signal, at };
      return { state: 'exited', exitCode: code ?? 0, at };
    }),
    failedToStart.then((err): SandboxEnd => ({ state: 'failed', reason: err.message, at: new Date() })),
  ]).finally(() => {
    network?.stop();
    clearInterval(watch);
    clearTimeout(deadline);
    clearTimeout(killTimer);
  });

  const stop = (reason: string, graceMs = opts.stopGraceMs): Promise<SandboxEnd> => {
    if (!stopping && child.exitCode === null && child.signalCode === null) {
      stopping = { reason };
      known = processesOf(child.pid ?? -1);
      for (const pid of known) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          // Gone meanwhile, or not ours to signal (bwrap's own monitor).
        }
      }
      killTimer = setTimeout(killAll, graceMs);
    }
    return ended;
  };

  const deadline = setTimeout(() => void stop('max_runtime'), spec.max_runtime_seconds * 1000);
  deadline.unref();
  const watch = setInterval(() => {
    if (!child.pid || stopping) return;
    known = processesOf(child.pid);
    const reached = limitReached(known, opts.disk, opts.limits);
    if (reached) void stop(reached);
  }, WATCH_MS);
  watch.unref();

  const entry: Entry = {
    kind: 'sandbox',
    process: () => (pidWhileRunning(init) === null ? null : init),
    ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
    env: sandboxEnv(options),
    limits,
    cgroupProcs: (opts.cgroup?.views() ?? []).map(([, host]) => path.join(host, 'cgroup.procs')),
    ended,
  };
  return { pid: child.pid ?? -1, startedAt, ready, ended, stop, entry };
}
