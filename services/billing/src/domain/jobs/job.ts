/**
 * A renter's job: what they want run and on what terms, not where. Billing's placer (place.ts) gives it a machine by
 * starting a session whose `job_id` is the job's ID (so at most one session of a job runs at a time), and follows
 * it (follow.ts): the job ends with its workload, or is queued again when its machine fails it, preferring another
 * machine, until it has used its attempts or its spend cap.
 *
 *   queued ──> placing ──> running ──> succeeded | failed | cancelled
 *     ^                       │
 *     └──── recovering <──────┘  (the machine went away, or the workload failed and retries were asked for)
 */
import type { WorkloadSpec } from '@gpu/common';
import type { JobAttemptRow, JobRow } from '../../db/job-repository.ts';
import type { JobState } from '../../db/schema.ts';

/** What a machine must offer a job. */
export interface JobTerms {
  gpu_count: number;
  /** Billing's model key or a driver's name (`H100`); any model when absent. */
  gpu_model?: string;
  min_vram_mb?: number;
  /** The most the job pays per GPU-hour (tokens, exact decimal). */
  max_price_per_gpu_hour: string;
  /** Interruptible at this bid per GPU-hour (its attempts may be taken back and placed again); absent: on demand. */
  bid_per_gpu_hour?: string;
  /** With a bid: placed on demand (at up to `max_price_per_gpu_hour`) when no machine can be had at the bid. */
  on_demand_fallback?: boolean;
  min_reliability?: number;
  region?: string;
}

/** A job as its renter reads it. */
export interface Job {
  row: JobRow;
  terms: JobTerms;
  workload: WorkloadSpec;
  attempts: JobAttemptRow[];
  /** Its place among queued jobs (1: next), while queued or recovering. */
  queuePosition: number | null;
}

const TERMINAL_JOB_STATES: readonly JobState[] = ['succeeded', 'failed', 'cancelled'];

export const isEnded = (state: JobState) => TERMINAL_JOB_STATES.includes(state);

/** The placer's settings (`jobs.*`). */
export interface JobSettings {
  place_interval: string;
  placing_timeout: string;
  retry_interval: string;
  /** How long a job placed again waits for its ended attempt's final checkpoint (its machine still there). */
  final_checkpoint_wait: string;
}
