/** The fleet on /metrics: machines counted by status when Prometheus scrapes (the offline-jump alert reads it). */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

const count = (metrics: string, status: string) =>
  Number(new RegExp(`^registry_providers\\{[^}]*status="${status}"[^}]*\\} (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);

describe('registry_providers', () => {
  it('exports every status, 0 where no machine has it (a healthy fleet has an offline series to compare with)', async () => {
    const metrics = (await h.app.inject({ url: '/metrics' })).body;
    for (const status of ['idle', 'busy', 'offline', 'maintenance', 'error']) {
      expect(metrics).toMatch(new RegExp(`^registry_providers\\{[^}]*status="${status}"[^}]*\\} 0$`, 'm'));
    }
  });

  it('counts the machines by status at each scrape', async () => {
    const scrape = async () => (await h.app.inject({ url: '/metrics' })).body;
    const before = await scrape();
    await register(h.app);
    await register(h.app);
    await register(h.app, { status: 'busy' });
    const after = await scrape();
    expect(count(after, 'idle') - count(before, 'idle')).toBe(2);
    expect(count(after, 'busy') - count(before, 'busy')).toBe(1);
  });

  it('answers a scrape while the table is locked, the counts as they were', async () => {
    const scrape = async () => (await h.app.inject({ url: '/metrics' })).body;
    await register(h.app);
    const idle = count(await scrape(), 'idle');
    const answered = await h.database.db.transaction().execute(async (trx) => {
      // As a migration or an operator's VACUUM FULL holds it: every read of the table waits.
      await sql`LOCK TABLE providers IN ACCESS EXCLUSIVE MODE`.execute(trx);
      const hung = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 30_000).unref());
      return Promise.race([scrape(), hung]);
    });
    expect(answered, 'the scrape never answered while the table was locked').toBeDefined();
    expect(count(answered!, 'idle')).toBe(idle);
    // Stale, and counted as such.
    expect(answered).toMatch(/^metric_reads_failed_total\{[^}]*metric="registry_providers"[^}]*\} 1$/m);
  });
});
