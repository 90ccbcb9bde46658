/**
 * The document says what the service enforces (`requestSchemaDrift` in `@gpu/common/testing`): every value generated
 * from a documented request field's schema (its bounds and their neighbours, samples of its pattern, awkward text) is
 * refused with a 400 naming the field exactly when the document refuses it. Solana addresses (base58 of 32 bytes:
 * billing's `x-base58-bytes`), amounts above zero with the token's decimals, `duration_hours` up to 87,600, a
 * workload's keys, paths and arguments, list filters and dates among them.
 */
import { requestSchemaDrift } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSolanaAddress } from '../src/domain/chain/index.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
beforeAll(async () => {
  h = await setupBilling();
});
afterAll(() => h?.close());

describe('the request schemas of openapi.json', () => {
  it('refuse exactly what the service refuses, field by field', { timeout: 300_000 }, async () => {
    const service = (await h.issuer.client('service')).headers;
    const daemon = (await h.issuer.client('daemon', h.admin.id)).headers;
    const drift = await requestSchemaDrift({
      app: h.app,
      callers: [h.admin.headers, service, daemon],
      // Billing's own extension: base58 text that decodes to exactly N bytes (a Solana address: 32).
      extensions: { 'x-base58-bytes': ((value: string, n: number) => n === 32 && isSolanaAddress(value)) as never },
      skipFields: {
        'querystring.cursor': 'opaque: only a cursor a page answered is one (400 INVALID_CURSOR)',
        'POST /api/v1/billing/jobs body.bid_per_gpu_hour':
          'a rule between fields: a bid at most max_price_per_gpu_hour (400 BID_ABOVE_MAX_PRICE)',
        'body.workload.command':
          'its first element, the program, may not be empty while its arguments may: a rule of one item of the list',
        'POST /api/v1/billing/sessions/{sessionID}/workload/state body.reason':
          'a rule between fields: a reason comes with failed and stopped only',
        'POST /api/v1/billing/sessions/{sessionID}/workload/state body.exit_code':
          'a rule between fields: an exit code comes with exited only',
        'PUT /api/v1/provider/{providerID}/rates body.provider_id':
          "a rule between the path and the body: the provider must be the path's",
        'PUT /api/v1/provider/{providerID}/rates body.power_rate_per_watt_hour':
          "bounded by the platform's configured ceiling (400 RATE_OUT_OF_BOUNDS)",
        'PUT /api/v1/provider/{providerID}/rates body.vram_rate_per_gb_hour':
          "bounded by the platform's configured ceiling (400 RATE_OUT_OF_BOUNDS)",
        'POST /api/v1/provider/{providerID}/payout body.amount':
          "checked once the caller is known to own the provider's wallet (404 first for a wallet of no one's)",
      },
    });
    expect(drift).toEqual([]);
  });
});
