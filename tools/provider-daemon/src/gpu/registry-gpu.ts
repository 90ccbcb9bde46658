/**
 * A GPU reading as the provider registry takes it: the static description for registration (model, VRAM, driver,
 * compute capability, power limit) and the live metrics for heartbeats.
 */
import type { GpuReading } from './nvidia-smi.ts';

export interface RegistryGpuSpec {
  model_name: string;
  /** nvidia-smi's MiB: the registry's `vram` holds what the driver reports. */
  vram: number;
  driver_version: string;
  compute_capability: string | null;
  /** The board's power limit in watts. */
  power_consumption: number | null;
}

export interface RegistryGpuMetrics {
  index: number;
  utilization_gpu: number | null;
  utilization_mem: number | null;
  temperature: number | null;
  power_draw: number | null;
  is_healthy: boolean;
}

const round = (n: number | null) => (n === null ? null : Math.round(n));

export function gpuSpec(r: GpuReading): RegistryGpuSpec {
  return {
    model_name: r.name,
    vram: r.memoryTotalMiB,
    driver_version: r.driverVersion,
    compute_capability: r.computeCapability,
    power_consumption: round(r.powerLimit),
  };
}

/**
 * A heartbeat's metrics for the GPU at position `index` of the registered list. Unhealthy: uncorrected ECC errors
 * since the driver loaded (the board needs attention before it takes work).
 */
export function gpuMetrics(r: GpuReading, index: number): RegistryGpuMetrics {
  return {
    index,
    utilization_gpu: round(r.utilizationGpu),
    utilization_mem: round(r.utilizationMemory),
    temperature: round(r.temperature),
    power_draw: round(r.powerDraw),
    is_healthy: r.eccUncorrected === null || r.eccUncorrected === 0,
  };
}
