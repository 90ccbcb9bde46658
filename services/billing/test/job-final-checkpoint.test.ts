/**
 * Whether a job placed again waits for its ended attempt's final checkpoint (domain/jobs/follow.ts): the checkpoints
 * an attempt kept while it ran do not count as its final one, which its daemon packs after the end.
 */
import { describe, expect, it } from 'vitest';
import { awaitsFinalCheckpoint } from '../src/domain/jobs/follow.ts';

const keeping = { workload: { command: ['train'], checkpoint: { interval_seconds: 300 } } };

describe("a job's wait for its ended attempt's final checkpoint", () => {
  it('waits after an attempt that kept checkpoints while it ran: the last of those is older than its end', () => {
    // The job's checkpoint is this attempt's periodic one: the final one, packed after its end, is newer.
    const job = { ...keeping, checkpoint_session: 'the-attempt', checkpoint_size: '4096' };
    expect(awaitsFinalCheckpoint(job, 'workload_exited', null)).toBe(true);
    expect(awaitsFinalCheckpoint(job, 'provider_ended', null)).toBe(true);
  });

  it('does not wait once its daemon said the final one (kept, or none comes)', () => {
    expect(awaitsFinalCheckpoint(keeping, 'workload_exited', new Date())).toBe(false);
  });

  it('does not wait for a machine that is gone, a workload that never ran, or one that keeps no checkpoint', () => {
    expect(awaitsFinalCheckpoint(keeping, 'provider_offline', null)).toBe(false);
    expect(awaitsFinalCheckpoint(keeping, 'workload_not_started', null)).toBe(false);
    expect(awaitsFinalCheckpoint({ workload: { command: ['train'] } }, 'workload_exited', null)).toBe(false);
  });
});
