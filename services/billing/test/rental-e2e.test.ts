/** A full rental paid by a real on-chain deposit, with its session events published on real NATS. */
import { connectPublisher, createLogger, type NatsPublisher, OutboxRelay } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { createWallet } from '../src/domain/wallets/wallets.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { end, H100_X1, manualClock, start, usage } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
let L: Localnet;
const h = useBillingHarness(async () => {
  L = await setupLocalnet();
  return { chain: L.chain, now: clock.now };
});

describe('a full rental', () => {
  it('is paid from an on-chain deposit, billed per minute, and announced on billing.events.*', async () => {
    const kp = await L.user(100n);
    const renter = await createWallet(h.db, {
      ownerType: 'user',
      ownerId: crypto.randomUUID(),
      solanaAddress: kp.publicKey.toBase58(),
    });
    await h.proveAddress(renter.id, kp);
    const provider = await h.fundedWallet('0', 'provider');
    const signature = await L.transfer(kp, L.treasury.publicKey, 12_500_000n); // 12.5 tokens
    const dep = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${renter.id}/deposit`,
      payload: { signature },
    });
    expect(dep.statusCode).toBe(201);

    const started = await start(h, {
      user_id: renter.ownerId,
      wallet_id: renter.id,
      provider_id: provider.ownerId,
      job_id: `job-${crypto.randomUUID()}`,
      ...H100_X1,
    });
    expect(started.statusCode).toBe(201);
    const id = started.json().session.id;
    expect(started.json().estimated_runtime_minutes).toBe(147); // 12.5 / 5.10 per hour = 147.06 min
    clock.advance(5 * 60_000);
    const upd = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-update',
      payload: { session_id: id, timestamp: clock.now().toISOString(), gpu_utilization: 99, power_draw_w: 310 },
    });
    expect(upd.json().session).toMatchObject({ billed_minutes: 5, total_cost: '0.425000', actual_power_w: '310' });
    clock.advance(5 * 60_000 + 20_000); // 10 min 20 s → 11 started minutes
    expect((await usage(h, id)).json()).toMatchObject({ elapsed_minutes: 11, cost_so_far: '0.935000' });
    const record = (await end(h, id)).json().billing_record;
    expect(record).toMatchObject({
      billed_minutes: 11,
      total_cost: '0.935000',
      platform_fee: '0.046750',
      provider_earnings: '0.888250',
    });
    expect(await h.balanceOf(renter.id)).toMatchObject({ available: '11.565000', locked: '0.000000' });
    const history = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${renter.id}/transactions` });
    expect(history.json().map((t: { type: string }) => t.type)).toEqual(
      expect.arrayContaining(['deposit', 'lock', 'payment', 'release']),
    );
    const earnings = await h.app.inject({ method: 'GET', url: `/api/v1/provider/${provider.ownerId}/earnings` });
    expect(earnings.json()).toMatchObject({ total_earned: '0.888250', available_for_payout: '0.888250' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);

    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'billing-e2e',
    })) as NatsPublisher;
    const received: { subject: string; data: { session?: { id: string } } }[] = [];
    const sub = publisher.connection.subscribe('billing.events.session.>', {
      callback: (_err, msg) => {
        received.push({ subject: msg.subject, data: msg.json() });
      },
    });
    try {
      const relay = new OutboxRelay(h.db, publisher, {
        subject: 'billing.events',
        logger: createLogger({ service: 't', instanceId: 't', level: 'silent' }),
      });
      while ((await relay.flush()) > 0) {}
      await publisher.connection.flush();
      // Up to 20 s (it stops once both are in): a busy machine can be slow to deliver them.
      const deadline = Date.now() + 20_000;
      while (received.filter((m) => m.data.session?.id === id).length < 2 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(received.filter((m) => m.data.session?.id === id).map((m) => m.subject)).toEqual([
        'billing.events.session.started',
        'billing.events.session.completed',
      ]);
    } finally {
      sub.unsubscribe();
      await publisher.close();
    }
  });
});
