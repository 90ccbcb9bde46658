/**
 * A renter's workload in a container (container mode: a spec with `image`), on a machine whose provider configured a
 * runtime (`workloads.container_runtime`: Podman's CLI; its global flags in `workloads.container_runtime_args`). The
 * same promises as the sandbox (sandbox.ts), kept by the runtime:
 *
 * - the image (pulled while the workload is `preparing`, unbilled) with its root filesystem read-only, its own `/tmp`
 *   and the work directory at `/work` (its current directory and `HOME`), both on its disk (disk.ts: a filesystem of
 *   its own, so the kernel holds it to its allowance), its inputs read-only at `/work/inputs`, `/work/output/`
 *   uploaded at its end; a program that is not in it never starts (`command_not_found`, unbilled);
 * - **only the leased GPUs**: on a real machine through CDI (`--device nvidia.com/gpu=<index>`: the NVIDIA Container
 *   Toolkit's spec, `nvidia-ctk cdi generate`, gives the GPU's node, the control nodes and the driver's libraries), on
 *   a simulated machine its stand-in files at `/dev/nvidia<index>`; `CUDA_VISIBLE_DEVICES` and
 *   `NVIDIA_VISIBLE_DEVICES` name them by UUID;
 * - no network unless its spec has `network` (then slirp4netns without the host's loopback, and the private ranges
 *   and the host's addresses routed nowhere before the workload starts, as in the sandbox);
 * - every capability dropped, no new privileges, the workload's own user (a root daemon: one per slot), limits on
 *   processes (`--pids-limit` and `RLIMIT_NPROC`), memory (the daemon's watch each second: past it, `memory_limit`;
 *   the cgroup's, without swap, a quarter above, for one that grows faster), open files, one file's size, and its
 *   disk (`disk_limit` once it is full);
 * - at most `max_runtime_seconds` (`max_runtime`), also enforced by the runtime's own `--timeout` should the daemon
 *   be gone;
 * - labelled `gpu-platform.session=<id>` and `gpu-platform.daemon=<its run directory>`: a daemon started again removes
 *   every container it labelled (removeOrphans), and reports their workloads `stopped` (`daemon_restarted`) at the
 *   last time it knew them alive, as for the sandbox.
 *
 * Its variables go to the runtime in a file (mode 0600, removed once the container is made), never on a command line.
 * Its standard output and error reach the daemon through `start --attach` (`--log-driver none`: the runtime keeps no
 * copy), which keeps each cut at `logBytes`. Stopping it is the runtime's forced removal (SIGTERM, passed on by its
 * init, the grace period, SIGKILL), whatever phase it is in.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { workloadSpecSchema } from '@gpu/common';
import { hardMemory } from './cgroups.ts';
import { type CommandProblem, commandProblem, type ViewMount } from './command.ts';
import { type ProcessRef, pidWhileRunning, processRef } from './processes.ts';
import { containerEnv } from './runtime-env.ts';
import {
  allGone,
  boundedCopy,
  descendants,
  fenceNetwork,
  limitReached,
  type Sandbox,
  type SandboxEnd,
  type SandboxGpu,
  type SandboxOptions,
  WATCH_MS,
  withinHard,
  workloadEnv,
} from './sandbox.ts';

const run = promisify(execFile);

/** The label every workload container carries: the session it runs for. */
const SESSION_LABEL = 'gpu-platform.session';
/** And the daemon that made it (its run directory: one per daemon of a machine). */
export const DAEMON_LABEL = 'gpu-platform.daemon';

export interface ContainerRuntime {
  /** The runtime's command (`podman`). */
  path: string;
  /** Its global flags (`--runtime runc --cgroup-manager cgroupfs` on a host without systemd's cgroups). */
  args: string[];
}

export interface ContainerOptions extends Omit<SandboxOptions, 'gpus' | 'bwrapPath' | 'slirpPath' | 'hidden'> {
  runtime: ContainerRuntime;
  sessionId: string;
  /** The daemon's identity on the machine (its run directory), labelled on the container. */
  daemon: string;
  /** The leased GPUs, with their index on the machine (CDI names them by it). */
  gpus: (SandboxGpu & { index: number })[];
  /** Real GPUs through CDI; a simulated machine's stand-in files bound where their nodes would be. */
  simulated: boolean;
}

/**
 * The runtime's environment: the daemon's own variables that say where the runtime keeps its state, never the rest (a
 * proxy's credentials, say, which Podman would copy into containers).
 */
function runtimeEnv(): NodeJS.ProcessEnv {
  const keep = ['PATH', 'HOME', 'TMPDIR', 'XDG_RUNTIME_DIR', 'XDG_CONFIG_HOME', 'XDG_DATA_HOME'];
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => keep.includes(k) || k.startsWith('CONTAINERS_')),
  );
}

/**
 * The container runtime the settings name (`workloads.container_runtime` with its `container_runtime_args`), once it
 * answers `--version`: its version, or why it cannot run. Undefined where none is configured (sandbox mode only).
 */
export function configuredRuntime(settings: {
  container_runtime?: string | undefined;
  container_runtime_args: string[];
}): { runtime: ContainerRuntime; version: string } | { problem: string } | undefined {
  if (!settings.container_runtime) return undefined;
  const rt = { path: settings.container_runtime, args: settings.container_runtime_args };
  const version = spawnSync(rt.path, [...rt.args, '--version'], { encoding: 'utf8', env: runtimeEnv() });
  if (version.status !== 0) return { problem: `workloads.container_runtime ${rt.path} cannot be run` };
  return { runtime: rt, version: version.stdout.trim() };
}

/**
 * Runs the runtime with the global flags; rejects with its own words when it fails. `cwd`: where it runs (a session's
 * own directory for the calls that start its container: see startContainer).
 */
async function runtime(rt: ContainerRuntime, args: string[], timeoutMs = 60_000, cwd?: string): Promise<string> {
  try {
    const { stdout } = await run(rt.path, [...rt.args, ...args], {
      timeout: timeoutMs,
      maxBuffer: 4 * 1024 * 1024,
      env: runtimeEnv(),
      ...(cwd ? { cwd } : {}),
    });
    return stdout;
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`${rt.path} ${args[0]}: ${(e.stderr || e.message).trim().slice(0, 500)}`);
  }
}

/**
 * Stops (the stop signal, `graceSeconds`, SIGKILL) and removes containers with their volumes; once removed nothing
 * can start them.
 */
function remove(rt: ContainerRuntime, names: string[], graceSeconds = 0, timeoutMs = 60_000): Promise<string> {
  return runtime(rt, ['rm', '--force', '--volumes', '--time', String(graceSeconds), ...names], timeoutMs);
}

/** What `init` says when the image's program or user is not there (or may not be run): the renter's mistake. */
const IMAGE_MISTAKE =
  /executable file not found|no such file or directory|permission denied|unable to find user|exec format error/i;

/** The container of a session (one per session; a later start removes a leftover first). */
const containerName = (sessionId: string) => `gpu-session-${sessionId}`;

/**
 * Why this machine does not pull the image, or null when it does: a registry named by an address or as `localhost`
 * (the provider's own network and images, which a renter's reference must not reach) unless the provider allows it
 * (`workloads.allowed_registries`). Names without a registry are Docker Hub's.
 */
export function imageRefused(image: string, allowed: readonly string[]): string | null {
  const first = image.split('/')[0]!;
  if (!image.includes('/') || !(first.includes('.') || first.includes(':') || first === 'localhost')) return null;
  const host = first.replace(/:\d+$/, '');
  if (allowed.includes(first) || allowed.includes(host)) return null;
  if (host === 'localhost' || host.endsWith('.localhost') || isIP(host) !== 0) {
    return `${first}: a registry by address or on the machine itself, which this machine does not pull from`;
  }
  return null;
}

/** Why a pull failed: the machine's fault (its disk), or the image's (unknown, refused by its registry, unreachable). */
export class PullError extends Error {
  constructor(
    message: string,
    readonly machineFault: boolean,
  ) {
    super(message);
  }
}

/** Pulls the image unless the machine has it (while the workload is `preparing`: unbilled); rejects when it cannot. */
export async function pullImage(rt: ContainerRuntime, image: string, timeoutMs: number): Promise<void> {
  try {
    await runtime(rt, ['image', 'exists', image]);
    return;
  } catch {
    // Not here: pulled.
  }
  try {
    await runtime(rt, ['pull', '--quiet', image], timeoutMs);
  } catch (err) {
    const message = (err as Error).message;
    throw new PullError(message, /no space left|disk quota|read-only file system/i.test(message));
  }
}

/**
 * Removes every workload container this daemon (`daemon`, its run directory) made: at its start, each is one an earlier
 * life started and left behind. Gives back the sessions they ran for.
 */
export async function removeOrphans(rt: ContainerRuntime, daemon: string): Promise<string[]> {
  const out = await runtime(rt, [
    'ps',
    '--all',
    '--filter',
    `label=${DAEMON_LABEL}=${daemon}`,
    '--format',
    `{{.ID}} {{index .Labels "${SESSION_LABEL}"}}`,
  ]);
  const rows = out
    .split('\n')
    .map((l) => l.trim().split(' '))
    .filter((r) => r[0]);
  if (rows.length > 0)
    await remove(
      rt,
      rows.map((r) => r[0]!),
    );
  return rows.map((r) => r[1] ?? '');
}

/** The grace period between the stop signal and SIGKILL in the runtime's whole seconds. */
const graceSeconds = (graceMs: number) => Math.ceil(graceMs / 1000);

/** The `create` arguments of the workload's container. */
function createArgs(opts: ContainerOptions, envFile: string, envArgs: string[]): string[] {
  const { spec, limits } = opts;
  const nofile = withinHard('Max open files', limits.openFiles);
  const nproc = withinHard('Max processes', limits.processes);
  const fsize = withinHard('Max file size', limits.diskBytes);
  const args = [
    'create',
    '--name',
    containerName(opts.sessionId),
    '--label',
    `${SESSION_LABEL}=${opts.sessionId}`,
    '--label',
    `${DAEMON_LABEL}=${opts.daemon}`,
    '--pull=never',
    '--read-only',
    '--read-only-tmpfs=false',
    // The image's own volumes would be writable places on the host's disk, outside every limit: none.
    '--image-volume=ignore',
    // The host's proxy variables (and any credentials in them) are not the workload's.
    '--http-proxy=false',
    '--no-healthcheck',
    // An init (Debian's catatonit) as its first process: the workload gets the stop signal (a first process without a
    // handler for it would not) and its orphans are reaped.
    '--init',
    // SIGTERM whatever the image says (the platform promises SIGTERM, then SIGKILL after the grace period).
    '--stop-signal',
    'SIGTERM',
    // Its /tmp on its disk, or (watched directories) a tmpfs of its byte allowance.
    ...(opts.disk.tmpDir
      ? ['--volume', `${opts.disk.tmpDir}:/tmp:rw`]
      : ['--tmpfs', `/tmp:rw,size=${limits.diskBytes},mode=1777`]),
    '--network',
    // IPv4 alone, which the fence covers: no IPv6 way to the provider's network or the host.
    spec.network ? 'slirp4netns:allow_host_loopback=false,enable_ipv6=false' : 'none',
    '--cap-drop=all',
    '--security-opt=no-new-privileges',
    '--pids-limit',
    String(limits.processes),
    // The daemon's watch stops it past its allowance (memory_limit); the kernel's limit, a quarter above (at least
    // 64 MiB), catches one that grows faster than the watch looks.
    '--memory',
    String(hardMemory(limits.memoryBytes)),
    '--memory-swap',
    String(hardMemory(limits.memoryBytes)),
    '--ulimit',
    `nofile=${nofile}:${nofile}`,
    '--ulimit',
    `nproc=${nproc}:${nproc}`,
    '--ulimit',
    `fsize=${fsize}:${fsize}`,
    // No log of the runtime's own (unbounded on its disk): the output reaches the daemon through the attach alone.
    '--log-driver',
    'none',
    '--stop-timeout',
    String(graceSeconds(opts.stopGraceMs)),
    // Should the daemon be gone, the runtime ends it at its maximum runtime (and the grace) all the same.
    '--timeout',
    String(spec.max_runtime_seconds + graceSeconds(opts.stopGraceMs)),
    '--volume',
    `${opts.disk.workDir}:/work:rw`,
    ...(opts.inputsDir ? ['--volume', `${opts.inputsDir}:/work/inputs:ro`] : []),
    '--workdir',
    '/work',
    '--env-file',
    envFile,
    ...envArgs,
    ...(opts.uid !== undefined ? ['--user', `${opts.uid}:${opts.uid}`] : []),
  ];
  for (const gpu of opts.gpus) {
    if (opts.simulated) args.push('--volume', `${gpu.device}:/dev/${path.basename(gpu.device)}:ro`);
    else args.push('--device', `nvidia.com/gpu=${gpu.index}`);
  }
  // `command` replaces the image's entrypoint and command: argv as given.
  if (spec.command) args.push('--entrypoint', JSON.stringify([spec.command[0]]));
  args.push(spec.image!, ...(spec.command?.slice(1) ?? []));
  return args;
}

/** The PATH a container runs with when its image names none (the runtime's own default). */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Why the container's program cannot be started (command.ts), looked up in its root filesystem (`podman mount`, a
 * root daemon's: elsewhere nothing is checked and the runtime says it) with its volumes where they will be bound.
 */
async function programProblem(
  rt: ContainerRuntime,
  name: string,
  opts: ContainerOptions,
): Promise<CommandProblem | null> {
  if (process.getuid?.() !== 0) return null;
  const config = JSON.parse(await runtime(rt, ['inspect', '--format', '{{json .Config}}', name])) as {
    Entrypoint?: string[] | string | null;
    Cmd?: string[] | null;
    Env?: string[] | null;
    WorkingDir?: string;
  };
  const entrypoint = typeof config.Entrypoint === 'string' ? [config.Entrypoint] : (config.Entrypoint ?? []);
  const program = entrypoint[0] ?? config.Cmd?.[0];
  if (!program) return 'command_not_found';
  const root = (await runtime(rt, ['mount', name])).trim();
  try {
    const view: ViewMount[] = [
      { inside: '/', host: root },
      { inside: '/work', host: opts.disk.workDir },
      ...(opts.inputsDir ? [{ inside: '/work/inputs', host: opts.inputsDir }] : []),
      ...(opts.disk.tmpDir ? [{ inside: '/tmp', host: opts.disk.tmpDir }] : []),
    ];
    const pathVar = config.Env?.find((e) => e.startsWith('PATH='))?.slice(5) ?? DEFAULT_PATH;
    return commandProblem(program, view, { path: pathVar, cwd: config.WorkingDir || '/work', uid: opts.uid ?? null });
  } finally {
    await runtime(rt, ['unmount', name]).catch(() => {});
  }
}

/** Starts the workload's container; throws when its spec is not a container's the platform accepts. */
export function startContainer(opts: ContainerOptions): Sandbox {
  const spec = workloadSpecSchema.parse(opts.spec);
  if (!spec.image) throw new Error('a command without an image runs in the sandbox');
  const options = { ...opts, spec };
  const rt = opts.runtime;
  const name = containerName(opts.sessionId);
  const startedAt = new Date();
  const envFile = path.join(opts.logDir, 'container.env');
  /** The container's first process on the host, once made. */
  let hostPid = -1;
  /** That process as itself (entering it must never enter a later process given its PID). */
  let hostRef: ProcessRef | null = null;
  let failure: string | undefined;
  let stopping: { reason: string } | undefined;
  let attach: ReturnType<typeof spawn> | undefined;
  let known: number[] = [];
  let killTimer: NodeJS.Timeout | undefined;
  /**
   * The runtime for this container, run in the session's log directory: the monitor it starts (conmon) inherits its
   * working directory and creates an empty `oom` file there when the kernel kills the container for memory. From the
   * daemon's own directory (a checkout, for the tests) that file would land among the daemon's files; here it goes
   * with the session's directory.
   */
  const ctr = (args: string[], timeoutMs?: number) => runtime(rt, args, timeoutMs, opts.logDir);

  // Made, its network fenced, then started attached: its output streams to the daemon from the first byte.
  const started = (async () => {
    // The image keeps its own PATH.
    const env = containerEnv(workloadEnv(options));
    writeFileSync(envFile, env.file, { mode: 0o600 });
    try {
      await remove(rt, [name]).catch(() => {});
      await ctr(createArgs(options, envFile, env.args));
    } finally {
      rmSync(envFile, { force: true });
    }
    try {
      await ctr(['init', name]);
    } catch (err) {
      // The image's program (or user) is not there: the renter's mistake, as a command not found in the sandbox.
      if (IMAGE_MISTAKE.test((err as Error).message)) failure = 'command_unavailable';
      throw err;
    }
    // A program that is not in the image (or in /work) never starts: failed, never billed.
    const problem = await programProblem(rt, name, options);
    if (problem) {
      failure = problem;
      throw new Error(`${problem}: the workload's program is not there to run`);
    }
    hostPid = Number((await ctr(['inspect', '--format', '{{.State.Pid}}', name])).trim());
    hostRef = processRef(hostPid);
    if (spec.network && process.getuid?.() === 0) {
      if (hostRef === null) throw new Error('the container ended before its network was fenced');
      await fenceNetwork(hostRef);
    }
    if (stopping) throw new Error('stopped before it started');
    const child = spawn(rt.path, [...rt.args, 'start', '--attach', name], {
      env: runtimeEnv(),
      cwd: opts.logDir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    attach = child;
    const logs = Promise.all([
      boundedCopy(child.stdout!, path.join(opts.logDir, 'stdout.log'), opts.limits.logBytes),
      boundedCopy(child.stderr!, path.join(opts.logDir, 'stderr.log'), opts.limits.logBytes),
    ]);
    const closed = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
    // Running once the runtime says so (or already done: it ran).
    await ctr(['wait', '--condition', 'running', '--condition', 'exited', name]).catch(() => {});
    return { closed, logs };
  })();
  const ready: Promise<Date> = started.then(
    () => new Date(),
    (err: Error) => {
      if (stopping) throw err;
      failure ??= /network|slirp|fenc/i.test(err.message) ? 'network_unavailable' : 'container_unavailable';
      process.emitWarning(`a workload's container did not start: ${err.message}`);
      throw err;
    },
  );
  ready.catch(() => {});

  const ended: Promise<SandboxEnd> = (async (): Promise<SandboxEnd> => {
    let code: number | null = null;
    try {
      const { closed, logs } = await started;
      [code] = await closed;
      await logs;
    } catch {
      // Never started: failed, below.
    }
    // What the runtime says of its end (its exit code, whether the kernel killed it for memory), then it is removed.
    let state: { status: string; exitCode: number; oom: boolean } | null = null;
    try {
      const [status, exitCode, oom] = (
        await ctr(['inspect', '--format', '{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}', name])
      )
        .trim()
        .split(' ');
      state = { status: status ?? '', exitCode: Number(exitCode), oom: oom === 'true' };
    } catch {
      // Gone: removed by someone else (another life of the daemon, an operator), or never made.
    }
    // Removed whatever its state (an attach that died leaves it running: this ends it).
    await remove(rt, [name]).catch(() => {});
    await allGone(hostPid > 0 ? [hostPid, ...known] : known, 2000);
    const at = new Date();
    const exitCode = state?.exitCode ?? code;
    if (stopping) return { state: 'stopped', reason: stopping.reason, exitCode, signal: null, at };
    if (failure) return { state: 'failed', reason: failure, at };
    if (state === null) return { state: 'stopped', reason: 'container_removed', exitCode: code, signal: null, at };
    // The daemon lost its view of it (the attach ended while it ran): stopped here, the machine's fault.
    if (state.status !== 'exited' && state.status !== 'stopped')
      return { state: 'stopped', reason: 'attach_lost', exitCode: null, signal: null, at };
    // The kernel killed it for memory: the runtime says so, or (Podman 4.3 does not) its monitor's `oom` marker in the
    // session's directory does, written as it hears of the kill (SIGKILL: 137), which may be a moment after the end.
    if (state.oom || (state.exitCode === 137 && (await appears(path.join(opts.logDir, 'oom'), 2000))))
      return { state: 'stopped', reason: 'memory_limit', exitCode, signal: null, at };
    // Its writes failed for want of room (ENOSPC) and it ended before the watch looked: that was its end.
    if (opts.disk.full()) return { state: 'stopped', reason: 'disk_limit', exitCode, signal: null, at };
    return { state: 'exited', exitCode: state.exitCode, at };
  })().finally(() => {
    clearInterval(watch);
    clearTimeout(deadline);
    clearTimeout(killTimer);
  });

  const stop = (reason: string, graceMs = opts.stopGraceMs): Promise<SandboxEnd> => {
    if (!stopping && (!attach || (attach.exitCode === null && attach.signalCode === null))) {
      stopping = { reason };
      if (hostPid > 0) known = [hostPid, ...descendants(hostPid)];
      // The runtime stops it (SIGTERM, the grace period, SIGKILL) and removes it, whichever phase it is in: once removed,
      // nothing can start it (a start under way fails; one not yet asked for is not asked).
      void remove(rt, [name], graceSeconds(graceMs), graceMs + 30_000).catch(() => {});
      // An attach that outlives that is ended too.
      killTimer = setTimeout(() => attach?.kill('SIGKILL'), graceMs + 10_000);
      killTimer.unref();
    }
    return ended;
  };

  const deadline = setTimeout(() => void stop('max_runtime'), spec.max_runtime_seconds * 1000);
  deadline.unref();
  const watch = setInterval(() => {
    if (hostPid <= 0 || stopping || !attach) return;
    known = [hostPid, ...descendants(hostPid)];
    const reached = limitReached(known, opts.disk, opts.limits);
    if (reached) void stop(reached);
  }, WATCH_MS);
  watch.unref();

  return {
    get pid() {
      return hostPid;
    },
    startedAt,
    ready,
    ended,
    stop,
    entry: {
      kind: 'container',
      runtime: rt,
      name,
      process: () => (pidWhileRunning(hostRef) === null ? null : hostRef),
      ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
      ended,
    },
  };
}

/** Whether `file` exists within `ms` (looked for every 50 ms). */
async function appears(file: string, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; !existsSync(file); await new Promise((r) => setTimeout(r, 50))) {
    if (Date.now() >= deadline) return false;
  }
  return true;
}
