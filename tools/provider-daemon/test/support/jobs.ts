/**
 * A renter's side of jobs on the workload rig (workload-rig.ts), through billing's routes as the renter's own client
 * calls them: submitting one, reading it, and what a machine's owner does to one of its attempts.
 *
 *   const jobs = jobsOn(rig);
 *   const res = await jobs.submit(renter, { workload: { command: ['true'], max_runtime_seconds: 60 } });
 *   const done = await until(() => jobs.job(renter, res.json().id), ended, 40_000);
 */
import { expect } from 'vitest';
import type { Renter, WorkloadRig } from './workload-rig.ts';

// biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
export type JobJson = any;

/** A machine of the rig (`rig.machine()`). */
export type RigMachine = Awaited<ReturnType<WorkloadRig['machine']>>;

/** Whether the job has ended (succeeded, failed or cancelled). */
export const ended = (j: JobJson) => ['succeeded', 'failed', 'cancelled'].includes(j.state);

export function jobsOn(rig: WorkloadRig) {
  const jobs = {
    /** Submits a job: one GPU at up to 100 a GPU-hour, a spend cap of 5, unless `body` says. */
    submit(renter: Renter & { walletId: string }, body: Record<string, unknown>, key?: string) {
      return rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/jobs',
        headers: { ...renter.headers, ...(key ? { 'idempotency-key': key } : {}) },
        payload: { wallet_id: renter.walletId, gpu_count: 1, max_price_per_gpu_hour: '100', spend_cap: '5', ...body },
      });
    },

    /** The job as its renter reads it. */
    async job(renter: Renter, id: string): Promise<JobJson> {
      const res = await rig.billing.app.inject({ url: `/api/v1/billing/jobs/${id}`, headers: renter.headers });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    },

    /** Cancels the job as its renter; the job as the answer says. */
    async cancel(renter: Renter, id: string): Promise<JobJson> {
      const res = await rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/jobs/${id}/cancel`,
        headers: renter.headers,
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    },

    /**
     * The machine of an attempt (one of `machines`) takes its session back: its own daemon ends it, the provider's
     * fault. The machine.
     */
    async takeBack(machines: RigMachine[], attempt: { provider_id: string; session_id: string }): Promise<RigMachine> {
      const owner = machines.find((m) => m.providerId === attempt.provider_id)!;
      const taken = await rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/end-session',
        headers: { authorization: `Bearer ${await owner.deps.token.get()}` },
        payload: { session_id: attempt.session_id },
      });
      expect(taken.statusCode, taken.body).toBe(200);
      return owner;
    },

    /** An object of the renter's folder, through the storage service with the renter's own token. */
    async object(renter: Renter, key: string): Promise<Buffer> {
      const res = await fetch(`${rig.storage.url}/objects/${encodeURIComponent(key)}`, { headers: renter.headers });
      expect(res.status, key).toBe(200);
      return Buffer.from(await res.arrayBuffer());
    },

    /** The renter's wallet's balance (`available`, `locked`). */
    async balance(renter: Renter & { walletId: string }): Promise<{ available: string; locked: string }> {
      const res = await rig.billing.app.inject({
        url: `/api/v1/wallet/${renter.walletId}/balance`,
        headers: renter.headers,
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    },
  };
  return jobs;
}
