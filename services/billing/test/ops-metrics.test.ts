/**
 * What an operator's alerts read of billing on /metrics: the oldest pending withdrawal or payout's age (the stuck-payout
 * alert), not only how many are pending, so a steady trickle of quick payouts never looks stuck and one stuck payout
 * among them does.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { opsMetrics } from '../src/adapters/ops-metrics.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
beforeAll(async () => {
  h = await setupBilling();
  for (const metric of opsMetrics(h.ctx)) h.app.metrics.registerMetric(metric);
});
afterAll(() => h?.close());

const metric = async (name: string) => {
  const text = (await h.app.inject({ url: '/metrics' })).body;
  const value = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1];
  return value === undefined ? undefined : Number(value);
};

/** A withdrawal or payout row as the payout path leaves it, `minutesAgo` old. */
async function transaction(type: 'withdrawal' | 'payout', status: 'pending' | 'confirmed', minutesAgo: number) {
  const wallet = await h.fundedWallet('0', type === 'payout' ? 'provider' : 'user');
  await sql`INSERT INTO transactions (id, wallet_id, type, status, amount, created_at, updated_at)
    VALUES (${crypto.randomUUID()}, ${wallet.id}, ${type}, ${status}, 12,
            now() - make_interval(mins => ${minutesAgo}), now())`.execute(h.db);
}

describe('billing_payouts_pending_oldest_seconds', () => {
  it("is the oldest pending withdrawal's or payout's age, 0 with none pending", async () => {
    expect(await metric('billing_payouts_pending_oldest_seconds')).toBe(0);

    // Settled long ago, and pending for a moment: nothing stuck.
    await transaction('payout', 'confirmed', 600);
    await transaction('withdrawal', 'pending', 0);
    expect(await metric('billing_payouts_pending')).toBe(1);
    expect(await metric('billing_payouts_pending_oldest_seconds')).toBeLessThan(60);

    // One payout pending for 40 minutes among them: its age is what the alert sees.
    await transaction('payout', 'pending', 40);
    expect(await metric('billing_payouts_pending')).toBe(2);
    const oldest = (await metric('billing_payouts_pending_oldest_seconds'))!;
    expect(oldest).toBeGreaterThanOrEqual(40 * 60);
    expect(oldest).toBeLessThan(41 * 60);
  });
});

describe('a scrape while a table is locked', () => {
  it('answers within the read limit, the gauges of the locked tables as they were and the others read', async () => {
    await transaction('withdrawal', 'pending', 5);
    const before = await metric('billing_sessions_running');
    expect(before).toBeDefined();
    const answered = await h.db.transaction().execute(async (trx) => {
      // As a migration or an operator's VACUUM FULL holds them: every read of these tables waits.
      await sql`LOCK TABLE rental_sessions, outbox_events, payout_pause IN ACCESS EXCLUSIVE MODE`.execute(trx);
      const scrape = h.app.inject({ url: '/metrics' }).then((r) => r.body);
      const hung = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 30_000).unref());
      return Promise.race([scrape, hung]);
    });
    // Unbounded, the scrape waited for the lock (and held a connection per gauge until then).
    expect(answered, 'the scrape never answered while the tables were locked').toBeDefined();
    const text = answered!;
    expect(text).toMatch(new RegExp(`^billing_sessions_running\\{[^}]*\\} ${before}$`, 'm'));
    expect(text).toMatch(/^billing_payouts_pending\{[^}]*\} [1-9]\d*$/m);
    // The values kept are stale, and say so: each gauge that could not be read is counted.
    for (const stale of ['billing_sessions_running', 'billing_usage_lag_seconds', 'billing_outbox_backlog']) {
      expect(text).toMatch(new RegExp(`^metric_reads_failed_total\\{[^}]*metric="${stale}"[^}]*\\} 1$`, 'm'));
    }
    // The others read: their count stays at 0 (exported from the start, so that a rule sees the first failure).
    expect(text).toMatch(/^metric_reads_failed_total\{[^}]*metric="billing_payouts_pending"[^}]*\} 0$/m);
  });
});
