/** Where the daemon's GPU readings come from: the driver, or a simulated machine named in the configuration. */
import type { DaemonConfig } from '../config.ts';
import { type GpuReading, readNvidiaSmi } from './nvidia-smi.ts';

export interface GpuSource {
  readonly kind: 'nvidia-smi' | 'simulated';
  read(): Promise<GpuReading[]>;
}

export function gpuSource(config: DaemonConfig['gpu']): GpuSource {
  if (config.source === 'nvidia-smi') {
    return { kind: 'nvidia-smi', read: () => readNvidiaSmi(config.nvidia_smi_path) };
  }
  const readings: GpuReading[] = config.simulated_gpus.map((g, index) => ({
    index,
    uuid: `GPU-simulated-${index}`,
    name: g.name,
    pciBusId: null,
    driverVersion: g.driver_version,
    computeCapability: g.compute_capability,
    memoryTotalMiB: g.memory_total_mib,
    memoryUsedMiB: null,
    utilizationGpu: g.utilization_gpu,
    utilizationMemory: g.utilization_memory,
    temperature: g.temperature,
    powerDraw: g.power_draw_w,
    powerLimit: g.power_limit_w,
    eccUncorrected: null,
  }));
  return { kind: 'simulated', read: async () => readings };
}
