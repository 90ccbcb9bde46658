/**
 * A workload's files are keys in its renter's storage: billing asks storage for grants of them, and storage refuses a
 * key it cannot hold (a segment past `object_store.max_key_segment_bytes`, 233 bytes by default) before the store is
 * asked anything. So a session naming such an input or output prefix is refused at its start with the storage
 * service's 400, moving no money, and a daemon's grant for such an output file is a 400 too, never a URL that fails
 * at the store. Against the real auth service, registry, billing and storage (on the tests' S3 server).
 */
import { describe, expect, it } from 'vitest';
import { useWorkloadRig } from '../tools/provider-daemon/test/support/workload-rig.ts';

const rig = useWorkloadRig({ storage: true });
const long = 'n'.repeat(234);

describe("a workload's keys the store cannot hold", () => {
  it('refuse its start, moving no money, and its grants, with the limit named', async () => {
    const m = await rig.machine();
    const renter = await rig.renter();
    const balance = async () =>
      (
        await rig.billing.app.inject({ url: `/api/v1/wallet/${renter.walletId}/balance`, headers: renter.headers })
      ).json();
    const before = await balance();
    const run = (workload: object) =>
      rig.start(m.providerId, 1, { command: ['true'], max_runtime_seconds: 60, ...workload }, renter);

    for (const workload of [{ inputs: [{ key: `data/${long}` }] }, { output: { prefix: `runs/${long}/` } }]) {
      const refused = await run(workload);
      expect(refused.statusCode, refused.body).toBe(400);
      expect(refused.json().code).toBe('VALIDATION_ERROR');
      expect(refused.json().detail).toContain('233 bytes');
    }
    expect(await balance()).toEqual(before);

    const r = await rig.rent(m.providerId, 1, { command: ['sleep', '3600'], max_runtime_seconds: 3600 }, renter);
    const grant = async (outputs: string[]) =>
      rig.billing.app.inject({
        method: 'POST',
        url: `/api/v1/billing/sessions/${r.id}/workload/grants`,
        headers: { authorization: `Bearer ${await m.deps.token.get()}` },
        payload: { outputs },
      });
    expect((await grant(['n'.repeat(233)])).statusCode).toBe(200);
    const refused = await grant(['fine.txt', long]);
    expect(refused.statusCode, refused.body).toBe(400);
    expect(refused.json().detail).toContain('233 bytes');
  });
});
