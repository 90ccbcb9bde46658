/**
 * Stored bytes billed across the services (issue #28): the storage service measures a user's objects against the
 * real S3 server and reports the period to the real billing over HTTP with its own machine client (client
 * credentials from a credentials file, at the real auth service, as `pnpm start` configures it); billing charges
 * the period once from the user's wallet, however often it is reported, to the token's unit.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../services/auth/src/domain/clients.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { startService, type TestService, uniqueBucket } from '../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
const dir = mkdtempSync(join(tmpdir(), 'storage-billing-'));
let billing: BillingHarness;
let storage: TestService;

beforeAll(async () => {
  // A high rate, so a mebibyte for an hour is worth a token: 2^20 / 2^30 GB × 1 h × 1000 = 0.9765625.
  billing = await billingWithRegistry(platform, { config: { pricing: { storage_rate_per_gb_hour: '1000' } } });
  const billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `storage-${randomUUID()}`,
    role: 'service',
  });
  const credentialsFile = join(dir, 'storage.json');
  writeFileSync(credentialsFile, JSON.stringify({ client_id: client.id, client_secret: secret }), { mode: 0o600 });
  storage = await startService({
    objectStore: { owners_bucket: uniqueBucket('owners') },
    settings: {
      metering: {
        billing_url: billingUrl,
        auth_url: platform.authUrl,
        credentials_file: credentialsFile,
        interval: '1h',
      },
    },
  });
});
afterAll(async () => {
  await storage?.close();
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('storage billed', () => {
  it("charges a user's stored bytes for the period once, from their wallet, rounded half-even to the unit", async () => {
    const user = await storage.issuer.user(['renter']);
    const wallet = await billing.fundedWallet('5', 'user', undefined, { ownerId: user.id });
    const upload = await storage.app.inject({
      method: 'PUT',
      url: '/objects/dataset.bin',
      headers: user.headers,
      payload: Buffer.alloc(1 << 20, 1),
    });
    expect(upload.statusCode).toBe(201);

    const meter = storage.app.meter!;
    expect(meter).not.toBeNull();
    // Twice in the same period (a retry, a second instance): charged once.
    for (let i = 0; i < 2; i++) expect((await meter.meter()).failed).toBe(0);
    const charges = await billing.db.selectFrom('storage_charges').selectAll().where('user_id', '=', user.id).execute();
    expect(charges).toHaveLength(1);
    // 0.9765625 at 6 decimals, half-even: 0.976562.
    expect(charges[0]).toMatchObject({ bytes: 1 << 20, cost: '0.976562', charged: '0.976562', unpaid: '0.000000' });
    const available = await billing.db
      .selectFrom('ledger_accounts')
      .select('balance')
      .where('wallet_id', '=', wallet.id)
      .where('kind', '=', 'available')
      .executeTakeFirstOrThrow();
    expect(available.balance).toBe('4.023438');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });
});
