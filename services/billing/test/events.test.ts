/** Payment events: written to the outbox with the money movement, published on real NATS by the relay. */
import { connectPublisher, createLogger, type NatsPublisher, OutboxRelay } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { Dec } from '../src/domain/ledger/money.ts';
import { recordIntent, settle } from '../src/domain/wallets/payouts.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

describe('payment events', () => {
  it('publishes each outbox event once on billing.events.<kind> with its ID as Nats-Msg-Id', async () => {
    const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'billing-test',
    })) as NatsPublisher;
    const received: { subject: string; msgId?: string; correlation?: string; data: Record<string, unknown> }[] = [];
    const sub = publisher.connection.subscribe('billing.events.>', {
      callback: (_err, msg) => {
        received.push({
          subject: msg.subject,
          msgId: msg.headers?.get('Nats-Msg-Id'),
          correlation: msg.headers?.get('X-Correlation-ID'),
          data: msg.json(),
        });
      },
    });
    try {
      const w = await h.fundedWallet('10');
      const row = await recordIntent(
        h.ctx,
        { wallet: w, type: 'payout', amount: new Dec('10'), destination: w.solanaAddress!, correlationId: 'corr-42' },
        {
          signature: 'sig-events-test',
          serialized: 'AA==',
          lastValidBlockHeight: 1,
          createsAccount: false,
          sent: '10',
        },
        null,
      );
      await settle(h.ctx, row.id, 'confirmed', null, 'corr-42');

      const relay = new OutboxRelay(h.db, publisher, { subject: 'billing.events', logger });
      expect(await relay.flush()).toBe(2);
      expect(await relay.flush()).toBe(0);
      await publisher.connection.flush();
      // Up to 20 s (it stops once both are in): a busy machine can be slow to deliver them.
      const deadline = Date.now() + 20_000;
      while (received.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));

      expect(received.map((m) => m.subject)).toEqual([
        'billing.events.payout.pending',
        'billing.events.payout.confirmed',
      ]);
      const confirmed = received[1]!;
      expect(confirmed.correlation).toBe('corr-42');
      expect(confirmed.msgId).toBe(confirmed.data.event_id);
      expect(confirmed.data).toMatchObject({
        kind: 'payout.confirmed',
        transaction: { id: row.id, type: 'payout', status: 'confirmed', amount: '10.000000' },
      });
      const unpublished = await h.db
        .selectFrom('outbox_events')
        .select('id')
        .where('published_at', 'is', null)
        .execute();
      expect(unpublished).toHaveLength(0);
    } finally {
      sub.unsubscribe();
      await publisher.close();
    }
  });
});
