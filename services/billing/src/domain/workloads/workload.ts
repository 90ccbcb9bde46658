/**
 * A session's workload (`session_workloads`): what the renter runs on the leased GPUs, and how far it got. Billing
 * owns its state, because billing is tied to it: a workload session is billed only from the daemon's report that the
 * workload runs (`billed_from`) until it ended, and the workload's end ends the session.
 *
 * States: `pending` (the session started; the daemon has not picked it up) -> `preparing` (the daemon makes its work
 * directory and sandbox) -> `running` -> `exited` (with its exit code) | `failed` (it could not start: `reason`) |
 * `stopped` (`reason`: `max_runtime`, `memory_limit`, `disk_limit`, `session_ended`, ...). A state is reached once,
 * forward only: a report of a state already reached or passed changes nothing, one after an end is refused.
 */
import type { WorkloadSpec } from '@gpu/common';
import type { WorkloadState } from '../../db/schema.ts';

export type { WorkloadState };

/** The order of the states: a report may only move a workload forward. */
const RANK: Record<WorkloadState, number> = {
  pending: 0,
  preparing: 1,
  running: 2,
  exited: 3,
  failed: 3,
  stopped: 3,
};

export const isEnded = (state: WorkloadState) => RANK[state] === 3;

/** Whether a report of `next` moves a workload in `current` forward (false: it changes nothing, or is refused). */
export const movesForward = (current: WorkloadState, next: WorkloadState) => RANK[next] > RANK[current];

/** A workload as billing keeps it. */
export interface Workload {
  sessionId: string;
  spec: WorkloadSpec;
  state: WorkloadState;
  exitCode: number | null;
  reason: string | null;
  createdAt: Date;
  preparingAt: Date | null;
  runningAt: Date | null;
  endedAt: Date | null;
  /** What its daemon uploaded from its output directory (null until it said). */
  outputs: { bucket?: string; key: string; size: number }[] | null;
  /** The files of its output directory its daemon did not keep, with why (null until it said). */
  outputsRefused: RefusedOutput[] | null;
  /** Bytes the renter's streams carried into it and out of it through the relay (`gpu exec`, ports, `ssh`). */
  reach: { bytesIn: number; bytesOut: number };
}

/** An output file the daemon did not keep (a path under /work/output/), and why. */
export interface RefusedOutput {
  path: string;
  reason: string;
}

/** What the daemon says of a workload. */
export interface WorkloadReport {
  state: Exclude<WorkloadState, 'pending'>;
  /** When it happened, by the daemon's clock (billing keeps it within its own clock's bounds). */
  at: Date;
  exitCode?: number;
  reason?: string;
}

/**
 * Why a workload could not start that are the machine's fault (a bad spec or an image it cannot pull are not), and a
 * job's checkpoint it could not fetch or extract (the store away, or more than this machine's disk allowance): tried
 * again on another machine while the job has attempts left, never billed.
 */
const MACHINE_FAULTS = new Set([
  'sandbox_unavailable',
  'network_unavailable',
  'container_runtime_unavailable',
  'container_unavailable',
  'image_pull_failed',
  'checkpoint_unavailable',
]);

/** Stops that are the machine losing its workload (its daemon died or lost it): the machine's fault. */
const LOST = new Set(['daemon_restarted', 'daemon_stopped', 'attach_lost', 'container_removed']);

/**
 * The end reason a workload's end gives its session: it exited by itself (`workload_exited`), reached its maximum
 * runtime (`workload_max_runtime`), was stopped at a limit of the sandbox (`workload_limit`) or for another reason
 * (`workload_stopped`: its daemon could not reach billing when its paid time ran out), or could not start
 * (`workload_failed`), or was lost with its daemon (`workload_lost`: restarted or stopped under it, the machine's
 * fault). A stop because the session ended gives none: the session had ended already.
 */
export function sessionEndReason(report: WorkloadReport): string | null {
  switch (report.state) {
    case 'exited':
      return 'workload_exited';
    case 'failed':
      // The machine could not run any sandbox or container: its fault, and nothing ran.
      return MACHINE_FAULTS.has(report.reason ?? '') ? 'workload_not_started' : 'workload_failed';
    case 'stopped':
      if (report.reason === 'max_runtime') return 'workload_max_runtime';
      if (report.reason === 'session_ended') return null;
      // The machine's daemon died with it: a fault of the machine's.
      if (LOST.has(report.reason ?? '')) return 'workload_lost';
      if (report.reason === 'memory_limit' || report.reason === 'disk_limit') return 'workload_limit';
      // `paid_time_over` (its daemon lost billing and its funds ran out), or any other stop.
      return 'workload_stopped';
    default:
      return null;
  }
}
