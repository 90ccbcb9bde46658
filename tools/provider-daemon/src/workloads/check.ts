/**
 * The machine's own proof that a workload sees exactly the GPUs it leased (`pnpm --filter @gpu/provider-daemon
 * check-gpus`): for each GPU alone, for none and (with two or more) for all, it starts the sandbox a workload would
 * get, with the daemon's settings and user, and asks from inside
 *
 * - which GPU device nodes exist (`/dev/nvidia<n>`): exactly the leased GPUs' nodes, no other;
 * - on a real machine, which GPUs the driver shows (`nvidia-smi --query-gpu=uuid` inside): exactly the leased GPUs'
 *   UUIDs, none when none is leased;
 * - with a command of the operator's (`check-gpus -- <argv>`, a CUDA program, say), what it prints (recorded, not
 *   judged);
 *
 * the same in a container of an image of the operator's (`--image`, with `workloads.container_runtime`), and, with
 * `workloads.cgroups`, that the kernel stops a sandbox at its memory limit (its control group, cgroups.ts).
 *
 * An operator runs it once after installing the daemon and after a driver upgrade; a machine that fails it must not
 * take workloads (a driver that exposes every GPU through one node, an nvidia-smi outside `/usr`, bubblewrap missing).
 */
import { accessSync, chmodSync, constants, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { durationMs } from '@gpu/common';
import type { DaemonConfig } from '../config.ts';
import type { GpuReading } from '../gpu/nvidia-smi.ts';
import type { GpuSource } from '../gpu/source.ts';
import { cgroupPlace, type WorkloadCgroup, workloadCgroup } from './cgroups.ts';
import { configuredRuntime, pullImage, startContainer } from './container.ts';
import { controlDevices, nvidiaDevices, simulatedDevices } from './devices.ts';
import { filesystemProblem, prepareDisk, releaseDisk } from './disk.ts';
import { sandboxProblem, workloadLimits } from './runner.ts';
import { type SandboxEnd, startSandbox } from './sandbox.ts';

/** What one lease saw from inside its sandbox (or its container). */
interface LeaseCheck {
  mode: 'sandbox' | 'container';
  /** The leased GPUs' indices. */
  leased: number[];
  devices: { expected: string[]; seen: string[] };
  /** A real machine's: the GPUs nvidia-smi shows inside (null: not a real machine). */
  nvidiaSmi: { expected: string[]; seen: string[]; error: string | null } | null;
  /** The operator's command under this lease: its exit code and output. */
  command: { exitCode: number | null; stdout: string; stderr: string } | null;
  /** Why a probe's sandbox did not run (bubblewrap's own words). */
  errors: string[];
  ok: boolean;
}

export interface GpuCheckReport {
  source: GpuSource['kind'];
  gpus: { index: number; uuid: string; name: string; device: string }[];
  /** Whether the kernel stops a sandbox at its memory limit (its control group); null: `workloads.cgroups` off. */
  memory: { cgroup: string | null; ok: boolean; detail: string } | null;
  /** Whether the kernel holds a sandbox to its disk allowance (a filesystem of its own, disk.ts). */
  disk: { kind: 'filesystem' | 'watch'; ok: boolean; detail: string };
  /** The user the workloads run as (null: the daemon's own). */
  uid: number | null;
  leases: LeaseCheck[];
  ok: boolean;
}

/** The program as the daemon would run it: a path with a slash as given, else the first match on the daemon's PATH. */
function resolveProgram(program: string, envPath = process.env.PATH ?? ''): string | null {
  const candidates = program.includes('/') ? [program] : envPath.split(':').map((d) => path.join(d || '.', program));
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return path.resolve(c);
    } catch {}
  }
  return null;
}

/**
 * A workload that allocates 2 GB as fast as it can in a control group of a 64 MiB allowance (the daemon's watch told
 * it may hold far more): the kernel must stop it at once, and the daemon report `memory_limit`.
 */
async function memoryCheck(
  parent: string,
  run: (command: string[], cgroup: WorkloadCgroup) => Promise<{ end: SandboxEnd; stdout: string }>,
): Promise<NonNullable<GpuCheckReport['memory']>> {
  const { place, problem } = cgroupPlace(parent);
  if (!place) return { cgroup: null, ok: false, detail: `no control group can be made: ${problem}` };
  const where = place.version === 2 ? `cgroup v2 at ${place.dir}` : `cgroup v1 at ${place.memory}`;
  const cgroup = workloadCgroup(place, `gpu-check-${process.pid}`, { memoryBytes: 64 * 1024 * 1024, processes: 64 });
  const started = Date.now();
  const { end, stdout } = await run(
    ['sh', '-c', 'head -c 2000000000 /dev/zero | tail -c 2000000000 > /dev/null && echo survived'],
    cgroup,
  );
  const stopped = end.state === 'stopped' && end.reason === 'memory_limit';
  return {
    cgroup: where,
    ok: stopped && !stdout.includes('survived'),
    detail: stopped
      ? `a workload allocating 2 GB past a 64 MiB allowance was stopped by the kernel in ${Date.now() - started} ms`
      : `a workload allocating 2 GB past a 64 MiB allowance was not stopped by the kernel: ${JSON.stringify(end)}`,
  };
}

/**
 * A workload that writes 64 MB into a 16 MiB disk allowance: on a filesystem of its own the kernel refuses the write
 * past it (ENOSPC) and the daemon reports `disk_limit`, with no more than the allowance written.
 */
async function diskCheck(
  kind: 'filesystem' | 'watch',
  run: (command: string[]) => Promise<{ end: SandboxEnd; stdout: string }>,
): Promise<GpuCheckReport['disk']> {
  if (kind === 'watch') {
    return {
      kind,
      ok: false,
      detail: 'no filesystem of its own can be mounted here: the disk allowance is only watched',
    };
  }
  const { end, stdout } = await run(['sh', '-c', 'head -c 64000000 /dev/zero > /work/fill; wc -c < /work/fill']);
  const written = Number(stdout.trim());
  const ok = end.state === 'stopped' && end.reason === 'disk_limit' && written <= DISK_CHECK_BYTES;
  return {
    kind,
    ok,
    detail: `a workload writing 64 MB into a 16 MiB allowance ${ok ? 'was refused by the kernel' : 'was not held to it'} (${written} bytes written, ${JSON.stringify(end.state === 'exited' ? end : { state: end.state, reason: end.reason })})`,
  };
}

/** The disk allowance of the disk check. */
const DISK_CHECK_BYTES = 16 * 1024 * 1024;
/** MB and files of the disk of each of the other checks' workloads. */
const CHECK_DISK_MB = 64;
const CHECK_DISK_FILES = 16_384;

const sameSet = (a: string[], b: string[]) => a.length === b.length && a.every((x) => b.includes(x));

export async function checkGpuIsolation(opts: {
  config: DaemonConfig;
  gpus: GpuSource;
  /** Run under each lease too (an argv; never a shell string). */
  command?: string[];
  /** An image with `ls` (and, on a real machine, reached by CDI's `nvidia-smi`): each lease is checked in a container of it too. */
  image?: string;
}): Promise<GpuCheckReport> {
  const settings = opts.config.workloads;
  const readings = await opts.gpus.read();
  const simulated = opts.gpus.kind === 'simulated';
  mkdirSync(settings.run_dir, { recursive: true });
  chmodSync(settings.run_dir, 0o711);
  const root = mkdtempSync(path.join(settings.run_dir, 'check-'));
  chmodSync(root, 0o711);
  const devices = simulated ? simulatedDevices(path.join(root, 'dev'), readings) : nvidiaDevices(readings);
  const uid = process.getuid?.() === 0 ? settings.uid_base : null;
  const kind = settings.disk_filesystem ? filesystemProblem(root).then((p) => (p ? 'watch' : 'filesystem')) : null;
  /** The sessions' directories whose disks are released at the end. */
  const disks: string[] = [];
  const smi = simulated ? null : resolveProgram(opts.config.gpu.nvidia_smi_path);
  const leases: number[][] = [...readings.map((r) => [r.index]), []];
  if (readings.length > 1) leases.push(readings.map((r) => r.index));
  let n = 0;
  // The runtime as the runner takes it: one that does not answer --version is refused before anything is pulled.
  const configured = configuredRuntime(settings);
  const runtime = configured && 'runtime' in configured ? configured.runtime : undefined;
  /** Runs `command` in a sandbox (or, with `image`, a container) on the leased GPUs and gives back what it printed. */
  const inside = async (
    leased: GpuReading[],
    command: string[],
    cgroup?: WorkloadCgroup,
    image?: string,
    // The device checks' disks are small: each is reserved on the machine's disk in full (disk.ts).
    limits = {
      ...workloadLimits(settings, Math.min(settings.disk_mb, CHECK_DISK_MB)),
      diskFiles: Math.min(settings.disk_files, CHECK_DISK_FILES),
    },
  ) => {
    const dir = path.join(root, `s${n++}`);
    const logDir = path.join(dir, 'logs');
    mkdirSync(logDir, { recursive: true });
    chmodSync(dir, 0o711);
    // As the runner makes it: a filesystem of its own where the machine can mount one.
    const disk = await prepareDisk(dir, limits, (await kind) ?? 'watch', uid);
    disks.push(dir);
    const common = {
      spec: { command, env: {}, max_runtime_seconds: 120, network: false, inputs: [], ...(image ? { image } : {}) },
      disk,
      logDir,
      controlDevices: simulated ? [] : controlDevices(),
      limits,
      ...(uid !== null ? { uid } : {}),
      platformEnv: { GPU_PLATFORM_SESSION_ID: 'gpu-check' },
      stopGraceMs: durationMs(settings.stop_grace),
    };
    const gpus = leased.map((r) => ({ index: r.index, uuid: r.uuid, device: devices.get(r.index)! }));
    const sandbox =
      image && runtime
        ? startContainer({
            ...common,
            gpus,
            simulated,
            runtime,
            sessionId: `gpu-check-${process.pid}-${n}`,
            daemon: `${path.resolve(settings.run_dir)}/check`,
          })
        : startSandbox({
            ...common,
            gpus: gpus.map((g) => ({ uuid: g.uuid, device: g.device })),
            hidden: [],
            bwrapPath: settings.bwrap_path,
            ...(cgroup ? { cgroup } : {}),
          });
    const end = await sandbox.ended;
    const read = (f: string) => readFileSync(path.join(logDir, f), 'utf8');
    return {
      exitCode: end.state === 'exited' ? end.exitCode : end.state === 'stopped' ? end.exitCode : null,
      failure: end.state === 'exited' ? null : `${end.state}: ${end.reason}`,
      end,
      stdout: read('stdout.log'),
      stderr: read('stderr.log'),
    };
  };
  try {
    const problem = sandboxProblem(settings.bwrap_path, path.resolve(settings.run_dir));
    if (problem) throw new Error(problem);
    if (opts.image) {
      if (!configured) throw new Error('--image needs workloads.container_runtime (podman)');
      if ('problem' in configured) throw new Error(configured.problem);
      await pullImage(configured.runtime, opts.image, durationMs(settings.image_pull_timeout));
    }
    const checks: LeaseCheck[] = [];
    const modes = opts.image ? (['sandbox', 'container'] as const) : (['sandbox'] as const);
    for (const mode of modes)
      for (const indices of leases) {
        const image = mode === 'container' ? opts.image : undefined;
        const leased = readings.filter((r) => indices.includes(r.index));
        const listing = await inside(leased, ['ls', '-1', '/dev'], undefined, image);
        const errors =
          listing.exitCode === 0
            ? []
            : [`ls /dev: ${listing.failure ?? `exit ${listing.exitCode}`}: ${listing.stderr.trim().slice(0, 500)}`];
        const seenNodes = listing.stdout.split('\n').filter((l) => /^nvidia\d+$/.test(l));
        const expectedNodes = leased.map((r) => path.basename(devices.get(r.index)!));
        let nvidiaSmi: LeaseCheck['nvidiaSmi'] = null;
        if (!simulated) {
          const expected = leased.map((r) => r.uuid);
          if (smi === null) {
            nvidiaSmi = { expected, seen: [], error: `${opts.config.gpu.nvidia_smi_path} is not on the PATH` };
          } else {
            // In a container, the nvidia-smi CDI gives it (on its PATH); in the sandbox, the host's.
            const program = image ? 'nvidia-smi' : smi;
            const out = await inside(leased, [program, '--query-gpu=uuid', '--format=csv,noheader'], undefined, image);
            const seen = out.stdout
              .split('\n')
              .map((l) => l.trim())
              .filter((l) => l.startsWith('GPU-'));
            // With none leased nvidia-smi says "No devices were found" (exit 6): that is the answer, not an error.
            const none = /No devices were found/i.test(out.stdout + out.stderr);
            const error =
              out.exitCode === 0 || (none && seen.length === 0)
                ? null
                : `exit ${out.exitCode ?? out.failure}: ${(out.stderr || out.stdout).trim().slice(0, 500)}`;
            nvidiaSmi = { expected, seen, error };
          }
        }
        const command = opts.command?.length && !image ? await inside(leased, opts.command) : null;
        const ok =
          errors.length === 0 &&
          sameSet(seenNodes, expectedNodes) &&
          (nvidiaSmi === null || (nvidiaSmi.error === null && sameSet(nvidiaSmi.seen, nvidiaSmi.expected)));
        checks.push({
          mode,
          leased: indices,
          devices: { expected: expectedNodes, seen: seenNodes },
          nvidiaSmi,
          command: command && { exitCode: command.exitCode, stdout: command.stdout, stderr: command.stderr },
          errors,
          ok,
        });
      }
    const memory = settings.cgroups ? await memoryCheck(settings.cgroup_parent, (c, cg) => inside([], c, cg)) : null;
    const disk = await diskCheck((await kind) ?? 'watch', (c) =>
      inside([], c, undefined, undefined, {
        ...workloadLimits(settings),
        diskBytes: DISK_CHECK_BYTES,
        diskFiles: 1024,
      }),
    );
    return {
      source: opts.gpus.kind,
      gpus: readings.map((r) => ({ index: r.index, uuid: r.uuid, name: r.name, device: devices.get(r.index)! })),
      uid,
      leases: checks,
      memory,
      disk,
      ok: checks.every((c) => c.ok) && (memory === null || memory.ok) && disk.ok,
    };
  } finally {
    for (const dir of disks) await releaseDisk(dir).catch(() => {});
    rmSync(root, { recursive: true, force: true });
  }
}
