/** Two apps in one process share nothing: caches and batchers belong to the context each app builds. */
import { createLogger, withRequestLogger } from '@gpu/common';
import type { Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import { billingContext } from '../src/app.ts';
import { billingConfigSchema } from '../src/config.ts';
import type { BillingDB } from '../src/db/schema.ts';

describe('billing context', () => {
  const deps = {
    config: billingConfigSchema.parse({ log_level: 'silent' }),
    logger: createLogger({ service: 'billing-test', instanceId: 'test', level: 'silent' }),
    db: {} as Kysely<BillingDB>,
    chain: null,
  };

  it('gives each app its own state, shared by the copies a request makes', () => {
    const a = billingContext(deps);
    const b = billingContext(deps);
    expect(a.state).not.toBe(b.state);
    expect(a.state.accountIds).not.toBe(b.state.accountIds);
    expect(a.state.ratesJson).not.toBe(b.state.ratesJson);
    a.state.accountIds.set('w:available', 'id-1');
    expect(b.state.accountIds.get('w:available')).toBeUndefined();
    const perRequest = withRequestLogger(a, { log: deps.logger });
    expect(perRequest.state).toBe(a.state);
  });
});
