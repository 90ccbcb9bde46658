/**
 * The job queue shared by every renter (domain/jobs/, db/job-repository.ts), against the real auth service, registry
 * and billing, with no placer running: the tests read the queue as a placer's round claims it. Renters take turns, so
 * one renter's many queued jobs hold back no one else's, and a renter holds at most `jobs.max_open_per_renter` jobs
 * not ended, however many submits arrive at once.
 */
import { describe, expect, it } from 'vitest';
import { claimJobsToPlace } from '../../../services/billing/src/db/job-repository.ts';
import { jobsOn } from './support/jobs.ts';
import { useWorkloadRig } from './support/workload-rig.ts';

const MAX_OPEN = 12;
const rig = useWorkloadRig({ billing: { jobs: { place_interval: '1h', max_open_per_renter: MAX_OPEN } } });
const { submit, job, cancel } = jobsOn(rig);

/** A job no machine takes (none is registered): it waits in the queue. */
const queued = { gpu_count: 1, wait_for_capacity: true, workload: { command: ['true'], max_runtime_seconds: 60 } };

describe('the job queue', () => {
  it("takes renters in turns: a renter's many queued jobs hold back no one else's", { timeout: 60_000 }, async () => {
    const flooding = await rig.renter();
    const other = await rig.renter();
    const many: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await submit(flooding, queued);
      expect(res.statusCode, res.body).toBe(201);
      many.push(res.json().id);
    }
    const res = await submit(other, queued);
    expect(res.statusCode, res.body).toBe(201);
    const theirs = res.json().id as string;
    // The other renter's only job comes right after the flooding renter's first, not after all ten.
    const positions = await Promise.all(many.map(async (id) => (await job(flooding, id)).queue_position as number));
    const mine = (await job(other, theirs)).queue_position as number;
    expect(mine).toBe(positions[0]! + 1);
    expect(positions.slice(1).every((p) => p > mine)).toBe(true);
    // A placer's round of two claims both renters' first jobs.
    const claimed = await rig.billing.db
      .transaction()
      .execute((trx) => claimJobsToPlace(trx, new Date(), 2 + (positions[0]! - 1)));
    expect(claimed.map((j) => j.id).slice(-2)).toEqual([many[0], theirs]);
    for (const id of [...many, theirs]) await cancel(id === theirs ? other : flooding, id);
  });

  it(`holds at most ${MAX_OPEN} open jobs a renter, however many submits arrive at once`, {
    timeout: 60_000,
  }, async () => {
    const renter = await rig.renter();
    const answers = await Promise.all(Array.from({ length: MAX_OPEN + 6 }, () => submit(renter, queued)));
    const made = answers.filter((r) => r.statusCode === 201);
    const refused = answers.filter((r) => r.statusCode !== 201);
    expect(made).toHaveLength(MAX_OPEN);
    for (const r of refused) {
      expect(r.statusCode, r.body).toBe(409);
      expect(r.json()).toMatchObject({ code: 'TOO_MANY_OPEN_JOBS', max_open_jobs: MAX_OPEN });
    }
    // Another renter is not held back by it; an ended job makes room.
    expect((await submit(await rig.renter(), queued)).statusCode).toBe(201);
    await cancel(renter, made[0]!.json().id);
    expect((await submit(renter, queued)).statusCode).toBe(201);
  });
});
