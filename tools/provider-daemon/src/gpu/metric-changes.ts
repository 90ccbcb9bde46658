/**
 * Which GPU metrics a heartbeat carries: the registry keeps a metric a heartbeat leaves out, so a daemon sends a GPU's
 * metrics only when they moved enough to matter to a renter or the scheduler, and every GPU's in full now and then:
 *
 * - a change of health, always (it decides whether the GPU can be rented);
 * - core or memory utilization moved by `UTILIZATION_STEP` points or more, the temperature by `TEMPERATURE_STEP` °C,
 *   the power draw by `POWER_STEP` W, since the values last sent;
 * - every GPU's metrics every `FULL_EVERY` heartbeats (5 minutes at the default 30 s interval), and after anything
 *   that may have lost them (the first beat, a beat that failed, a record registered again).
 *
 * A million machines beating every 30 seconds would otherwise write some four million GPU rows a minute that say
 * what the registry already holds; the registry also skips a GPU whose reported values equal the stored ones.
 */
import type { RegistryGpuMetrics } from './registry-gpu.ts';

const UTILIZATION_STEP = 5;
const TEMPERATURE_STEP = 3;
const POWER_STEP = 10;
export const FULL_EVERY = 10;

type Metric = 'utilization_gpu' | 'utilization_mem' | 'temperature' | 'power_draw';

const STEPS: Record<Metric, number> = {
  utilization_gpu: UTILIZATION_STEP,
  utilization_mem: UTILIZATION_STEP,
  temperature: TEMPERATURE_STEP,
  power_draw: POWER_STEP,
};

/** Whether `now` differs from `sent` enough to send (a metric that appeared or went away counts). */
function moved(sent: RegistryGpuMetrics, now: RegistryGpuMetrics): boolean {
  if (sent.is_healthy !== now.is_healthy) return true;
  return (Object.keys(STEPS) as Metric[]).some((m) => {
    const [a, b] = [sent[m], now[m]];
    if (a === undefined || b === undefined) return a !== b;
    return Math.abs(a - b) >= STEPS[m];
  });
}

export class MetricChanges {
  private sent = new Map<number, RegistryGpuMetrics>();
  private beats = 0;

  /** The metrics of this heartbeat: the GPUs whose metrics moved enough, or all of them when a full one is due. */
  pick(metrics: RegistryGpuMetrics[]): RegistryGpuMetrics[] {
    const full = this.beats % FULL_EVERY === 0;
    this.beats++;
    const picked = full
      ? metrics
      : metrics.filter((m) => {
          const sent = this.sent.get(m.index);
          return sent === undefined || moved(sent, m);
        });
    for (const m of picked) this.sent.set(m.index, m);
    return picked;
  }

  /** Forget what was sent (a heartbeat that failed, a record registered again): the next heartbeat sends all. */
  reset(): void {
    this.sent.clear();
    this.beats = 0;
  }
}
