/**
 * What the daemon's sandbox tests share: a simulated machine of H100s (its device nodes under a folder of the test's),
 * the limits their sandboxes run under, and a program run in a workload with pipes.
 */
import path from 'node:path';
import { daemonConfigSchema } from '../../src/config.ts';
import { gpuSource } from '../../src/gpu/source.ts';
import { drained, startExec } from '../../src/reach/exec.ts';
import { simulatedDevices } from '../../src/workloads/devices.ts';
import { type Entry, entryCommand, workloadInnerPid } from '../../src/workloads/entry.ts';

/** The limits of the tests' sandboxes. */
export const SANDBOX_LIMITS = {
  processes: 64,
  openFiles: 256,
  memoryBytes: 512 * 1024 * 1024,
  diskBytes: 20 * 1024 * 1024,
  diskFiles: 10_000,
  logBytes: 64 * 1024,
};

/** A machine of `gpus` simulated H100s: its configuration, its GPUs' readings, and their device nodes under `root`. */
export async function simulatedMachine(root: string, gpus = 1) {
  const machine = daemonConfigSchema.parse({
    gpu: {
      source: 'simulated',
      simulated_gpus: Array.from({ length: gpus }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 })),
    },
  });
  const readings = await gpuSource(machine.gpu).read();
  return { machine, readings, devices: simulatedDevices(path.join(root, 'dev'), readings) };
}

/** Runs argv in the workload with pipes (`reachDir`: the daemon's folder for the variables' file): how it ended, its output and errors. */
export async function execIn(entry: Entry, argv: string[], reachDir: string, input = '') {
  const proc = startExec(entryCommand(entry, { argv, tty: false }, reachDir), null);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  proc.stdout.on('data', (d: Buffer) => out.push(d));
  proc.stderr?.on('data', (d: Buffer) => err.push(d));
  proc.stdin.end(input);
  const end = await proc.ended;
  await drained(proc.stdout);
  return { ...end, out: Buffer.concat(out).toString(), err: Buffer.concat(err).toString() };
}

/**
 * Waits until a sandbox's own program has started (bubblewrap's init's child, once bubblewrap has set its user
 * namespace up: only then can it be entered); its first process. A busy machine may take seconds: 20 at most.
 */
export async function programStarted(entry: Entry): Promise<number> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const init = entry.process()?.pid ?? null;
    if (init !== null && workloadInnerPid(init) !== null) return init;
    if (Date.now() > deadline) throw new Error("the sandbox's program did not start within 20 s");
    await new Promise((r) => setTimeout(r, 10));
  }
}
