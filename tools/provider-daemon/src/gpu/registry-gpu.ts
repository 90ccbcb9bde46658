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

/** A heartbeat's metrics of one GPU: a metric the board does not report is left out (the registry keeps the last). */
export interface RegistryGpuMetrics {
  index: number;
  utilization_gpu?: number;
  utilization_mem?: number;
  temperature?: number;
  power_draw?: number;
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
  const metrics: RegistryGpuMetrics = { index, is_healthy: r.eccUncorrected === null || r.eccUncorrected === 0 };
  const put = (key: 'utilization_gpu' | 'utilization_mem' | 'temperature' | 'power_draw', value: number | null) => {
    if (value !== null) metrics[key] = Math.round(value);
  };
  put('utilization_gpu', r.utilizationGpu);
  put('utilization_mem', r.utilizationMemory);
  put('temperature', r.temperature);
  put('power_draw', r.powerDraw);
  return metrics;
}
