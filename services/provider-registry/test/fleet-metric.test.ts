/** The fleet on /metrics: machines counted by status when Prometheus scrapes (the offline-jump alert reads it). */
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
});
