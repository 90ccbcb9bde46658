/**
 * The device nodes of a machine's GPUs, by the index the daemon registered them under (nvidia-smi's, PCI bus order):
 *
 * - a real machine: `/dev/nvidia<minor>`, the minor read from the driver (`/proc/driver/nvidia/gpus/<bus>/information`,
 *   "Device Minor"), which need not equal nvidia-smi's index; `/dev/nvidia<index>` where the driver does not say;
 * - a simulated machine: a stand-in file per GPU in the daemon's run directory (`nvidia<index>`, saying which GPU it
 *   is), bound into the sandbox where the device node would be, so every check of "only the leased GPUs" is real
 *   except the GPU.
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { GpuReading } from '../gpu/nvidia-smi.ts';

/** The driver's control nodes a CUDA program opens beside its GPUs' (those that exist on this machine). */
export function controlDevices(dev = '/dev'): string[] {
  return ['nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools', 'nvidia-modeset']
    .map((n) => path.join(dev, n))
    .filter((p) => existsSync(p));
}

/** The driver's minor number of each GPU, by PCI bus ID (lower case, `0000:3b:00.0`). */
function driverMinors(procDir = '/proc/driver/nvidia/gpus'): Map<string, number> {
  const minors = new Map<string, number>();
  let buses: string[];
  try {
    buses = readdirSync(procDir);
  } catch {
    return minors;
  }
  for (const bus of buses) {
    try {
      const info = readFileSync(path.join(procDir, bus, 'information'), 'utf8');
      const minor = /Device Minor:\s*(\d+)/.exec(info)?.[1];
      if (minor !== undefined) minors.set(bus.toLowerCase(), Number(minor));
    } catch {
      // Not readable: the index is used.
    }
  }
  return minors;
}

/** A PCI bus ID as the driver's directory names it (nvidia-smi prints `00000000:3B:00.0`). */
const busKey = (id: string) => id.toLowerCase().replace(/^0000(?=[0-9a-f]{4}:)/, '');

/** The device node of each GPU of a real machine, by its index. */
export function nvidiaDevices(gpus: GpuReading[], procDir?: string): Map<number, string> {
  const minors = driverMinors(procDir);
  return new Map(
    gpus.map((g) => {
      const minor = g.pciBusId ? minors.get(busKey(g.pciBusId)) : undefined;
      return [g.index, `/dev/nvidia${minor ?? g.index}`];
    }),
  );
}

/** The stand-in device files of a simulated machine's GPUs, made in `dir`, by index. */
export function simulatedDevices(dir: string, gpus: GpuReading[]): Map<number, string> {
  mkdirSync(dir, { recursive: true });
  return new Map(
    gpus.map((g) => {
      const file = path.join(dir, `nvidia${g.index}`);
      writeFileSync(file, `simulated GPU ${g.index} ${g.uuid}\n`);
      // Any workload's user may open its leased GPUs, as the driver's nodes (0666).
      chmodSync(file, 0o666);
      return [g.index, file];
    }),
  );
}
