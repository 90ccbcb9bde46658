/** Usage updates over real NATS JetStream: a durable consumer, duplicates, redelivery, poison messages. */
import { connectPublisher, createLogger, type NatsPublisher } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUsageConsumer } from '../src/adapters/usage-consumer.ts';
import { applyUsageUpdate } from '../src/domain/usage-updates.ts';
import { H100_X1, manualClock, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });
let publisher: NatsPublisher;
beforeAll(async () => {
  publisher = (await connectPublisher({ url: testEnv.natsUrl, name: 'billing-usage-test' })) as NatsPublisher;
});
afterAll(async () => {
  await publisher?.close();
});

const records = (sessionId: string) =>
  h.db.selectFrom('usage_records').selectAll().where('session_id', '=', sessionId).orderBy('created_at').execute();

async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('usage over NATS', () => {
  it('applies each message once through a durable consumer, redelivered or not', async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const prefix = `test.usage.${suffix}`;
    const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
    const opts = {
      connection: publisher.connection,
      ctx: h.ctx,
      prefix,
      logger,
      stream: `USAGE_${suffix}`,
      durable: 'billing-usage',
    };
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(3 * 60_000);
    const msg = (messageId: string | undefined, power: number) => ({
      session_id: id,
      timestamp: clock.now().toISOString(),
      gpu_utilization: 50,
      power_draw_w: power,
      ...(messageId ? { message_id: messageId } : {}),
    });

    // Published while no consumer runs: the durable stream keeps them.
    const first = await startUsageConsumer(opts);
    await first.stop();
    await publisher.publish(`${prefix}.${id}`, msg('u-1', 200), { msgId: 'n-1' });
    await publisher.publish(`${prefix}.${id}`, msg('u-1', 200), { msgId: 'n-1-resent' }); // the daemon retried
    await publisher.publish(`${prefix}.${id}`, { nonsense: true }, { msgId: 'n-bad' });
    await publisher.publish(`${prefix}.${crypto.randomUUID()}`, msg('u-x', 1), { msgId: 'n-other' });
    // A message whose first delivery was applied but never acknowledged (a crash): redelivered by Nats-Msg-Id.
    clock.advance(60_000);
    await applyUsageUpdate(h.ctx, {
      sessionId: id,
      messageId: 'n-2',
      timestamp: clock.now(),
      gpuUtilization: 60,
      powerDrawW: 250,
    });
    await publisher.publish(`${prefix}.${id}`, msg(undefined, 250), { msgId: 'n-2' });
    await publisher.publish(`${prefix}.${id}`, msg('u-3', 275), { msgId: 'n-3' });

    const consumer = await startUsageConsumer(opts);
    try {
      const got = await until(
        () => records(id),
        (r) => r.length >= 3,
      );
      await new Promise((r) => setTimeout(r, 300)); // room for any wrong extra application
      const final = await records(id);
      expect(final.map((r) => r.message_id).sort()).toEqual(['n-2', 'u-1', 'u-3']);
      expect(got.length).toBe(3);
      const s = await h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
      expect(s).toMatchObject({ billed_minutes: 4, total_cost: '0.340000', actual_power_w: '275' });
      // Everything was acknowledged: nothing left pending on the durable consumer.
      const { jetstreamManager } = await import('@nats-io/jetstream');
      const jsm = await jetstreamManager(publisher.connection);
      const info = await until(
        () => jsm.consumers.info(`USAGE_${suffix}`, 'billing-usage'),
        (i) => i.num_ack_pending === 0 && i.num_pending === 0,
      );
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_pending).toBe(0);

      // /health reports a consumer that can no longer receive (here: deleted by an operator).
      await expect(consumer.check()).resolves.toBeUndefined();
      await jsm.consumers.delete(`USAGE_${suffix}`, 'billing-usage');
      const health = await until(
        () =>
          consumer.check().then(
            () => 'up',
            (err: Error) => err.message,
          ),
        (v) => v !== 'up',
      );
      expect(health).toMatch(/^usage consumer: consumer (deleted|not found)/);
      await jsm.streams.delete(`USAGE_${suffix}`);
    } finally {
      await consumer.stop();
    }
  });
});
