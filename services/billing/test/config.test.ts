import { ConfigError } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { providerCheckEveryMs } from '../src/background.ts';
import { loadBillingConfig } from '../src/config.ts';

describe('billing configuration', () => {
  it('ships the contract defaults', () => {
    const c = loadBillingConfig({});
    expect(c.server.port).toBe(8003);
    expect(c.database).toMatchObject({ url: '', embedded_path: '.data/billing/pglite' });
    expect(c.blockchain).toMatchObject({
      rpc_url: 'http://127.0.0.1:8899',
      commitment: 'finalized',
      token_decimals: 6,
    });
    expect(c.billing).toMatchObject({
      billing_interval: '1m',
      grace_period: '5m',
      minimum_balance: '1.0',
      initial_period: '1h',
      minimum_payout: '10',
    });
    expect(c.pricing.platform_fee_percent).toBe('5');
    expect(c.pricing.base_rates['nvidia-tesla-h100']).toBe('4.00');
    expect(c.pricing.base_rates.default).toBe('0.25');
    expect(c.pricing).toMatchObject({ vram_rate_per_gb_hour: '0.02', power_rate_per_watt_hour: '0.001' });
    expect(c.messaging).toMatchObject({ nats_url: '', subjects: { events: 'billing.events', usage: 'billing.usage' } });
  });

  it('looks running machines up at the registry: the way it learns without NATS, a backstop with NATS', () => {
    const defaults = loadBillingConfig({});
    expect(providerCheckEveryMs(defaults, false)).toBe(30_000);
    expect(providerCheckEveryMs(defaults, true)).toBe(300_000);
    const set = loadBillingConfig({ BILLING__BILLING__PROVIDER_RECHECK_INTERVAL: '0s' });
    expect(providerCheckEveryMs(set, true)).toBe(0);
    expect(providerCheckEveryMs(set, false)).toBe(30_000);
  });

  it('reads the plain aliases and BILLING__SECTION__KEY overrides', () => {
    const c = loadBillingConfig({
      DATABASE_URL: 'postgres://u@db/billing',
      NATS_URL: 'nats://nats:4222',
      PORT: '9003',
      BILLING__BLOCKCHAIN__COMMITMENT: 'confirmed',
      BILLING__BLOCKCHAIN__TOKEN_DECIMALS: '9',
      BILLING__BILLING__MINIMUM_PAYOUT: '25.5',
      TOKEN_MINT: 'So11111111111111111111111111111111111111112',
    });
    expect(c.database.url).toBe('postgres://u@db/billing');
    expect(c.messaging.nats_url).toBe('nats://nats:4222');
    expect(c.server.port).toBe(9003);
    expect(c.blockchain).toMatchObject({ commitment: 'confirmed', token_decimals: 9 });
    expect(c.blockchain.token_mint).toBe('So11111111111111111111111111111111111111112');
    expect(c.billing.minimum_payout).toBe('25.5');
  });

  it('refuses invalid values, naming the key and its source', () => {
    expect(() => loadBillingConfig({ BILLING__BLOCKCHAIN__COMMITMENT: 'eventually' })).toThrow(ConfigError);
    // A transfer seen only at `processed` may be on a fork that is dropped: never counted as landed.
    expect(() => loadBillingConfig({ BILLING__BLOCKCHAIN__COMMITMENT: 'processed' })).toThrow(/blockchain.commitment/);
    expect(() => loadBillingConfig({ BILLING__BILLING__MINIMUM_PAYOUT: '-1' })).toThrow(/billing.minimum_payout/);
    // A payout of the minimum to a fresh address would leave nothing once the token account fee is withheld.
    expect(() =>
      loadBillingConfig({ BILLING__BILLING__MINIMUM_PAYOUT: '0.5', BILLING__BILLING__TOKEN_ACCOUNT_FEE: '0.5' }),
    ).toThrow(/billing.minimum_payout.*token_account_fee/s);
    expect(loadBillingConfig({ BILLING__BILLING__TOKEN_ACCOUNT_FEE: '0' }).billing.token_account_fee).toBe('0');
  });
});
