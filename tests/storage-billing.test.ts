/**
 * Stored bytes billed across the services (issue #28): the storage service measures a user's objects against the
 * real S3 server and reports the period to the real billing over HTTP with its own machine client (client
 * credentials from a credentials file, at the real auth service, as `pnpm start` configures it), or over the real
 * NATS JetStream to billing's storage usage consumer; billing charges the period once from the user's wallet,
 * however often it is reported, to the token's unit, and never for a message without the storage service's token.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clientCredentials } from '@gpu/client';
import { connectPublisher, createLogger, type EventPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../services/auth/src/domain/clients.ts';
import { registerAndLogin } from '../services/auth/test/helpers.ts';
import { startStorageUsageConsumer } from '../services/billing/src/adapters/storage-usage-consumer.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { natsUsageSink } from '../services/storage/src/adapters/billing-usage.ts';
import { startService, type TestService, uniqueBucket } from '../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
const dir = mkdtempSync(join(tmpdir(), 'storage-billing-'));
let billing: BillingHarness;
let storage: TestService;
let credentials: { client_id: string; client_secret: string };

beforeAll(async () => {
  // A high rate, so a mebibyte for an hour is worth a token: 2^20 / 2^30 GB × 1 h × 1000 = 0.9765625.
  billing = await billingWithRegistry(platform, { config: { pricing: { storage_rate_per_gb_hour: '1000' } } });
  const billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `storage-${randomUUID()}`,
    role: 'service',
  });
  const credentialsFile = join(dir, 'storage.json');
  credentials = { client_id: client.id, client_secret: secret };
  writeFileSync(credentialsFile, JSON.stringify(credentials), { mode: 0o600 });
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

/**
 * Each measurement reports the period that ended last (an hour here): so close to an hour's end that two measurements
 * could fall on either side of it (and charge two periods: a CI run at 13:00 once did), the next hour is waited for.
 */
async function inOnePeriod(): Promise<void> {
  const hour = 3_600_000;
  const left = hour - (Date.now() % hour);
  if (left < 60_000) await new Promise((resolve) => setTimeout(resolve, left + 2_000));
}

describe('storage billed', () => {
  it("charges a user's stored bytes for the period once, from their wallet, rounded half-even to the unit", {
    timeout: 180_000,
  }, async () => {
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
    await inOnePeriod();
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

describe('storage billed over NATS', () => {
  it("charges a period reported over JetStream once, and never one sent without the storage service's token", {
    timeout: 180_000,
  }, async () => {
    const suffix = randomUUID().slice(0, 8);
    const prefix = `storage-test-${suffix}.usage`;
    const stream = `STORAGE_USAGE_${suffix}`;
    const publisher: EventPublisher = await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'storage-usage-test',
      stream: { name: stream, subjects: [`${prefix}.>`] },
    });
    const consumer = await startStorageUsageConsumer({
      connection: (
        publisher as unknown as { connection: Parameters<typeof startStorageUsageConsumer>[0]['connection'] }
      ).connection,
      ctx: billing.ctx,
      verifier: billing.app.tokenVerifier,
      prefix,
      stream,
      durable: 'billing-storage-usage',
      logger: createLogger({ service: 'storage-billing-test', instanceId: 't', level: 'silent' }),
    });
    const token = clientCredentials({
      authUrl: platform.authUrl,
      clientId: credentials.client_id,
      clientSecret: credentials.client_secret,
    });
    const metering = {
      billing_url: '',
      auth_url: platform.authUrl,
      client_id: '',
      client_secret: '',
      credentials_file: '',
      interval: '1h',
      timeout: '10s',
    };
    const sink = natsUsageSink(metering, prefix, publisher, token)!;
    const overNats = await startService({ objectStore: { owners_bucket: uniqueBucket('owners') }, usageSink: sink });
    try {
      const user = await overNats.issuer.user(['renter']);
      await billing.fundedWallet('5', 'user', undefined, { ownerId: user.id });
      const upload = await overNats.app.inject({
        method: 'PUT',
        url: '/objects/dataset.bin',
        headers: user.headers,
        payload: Buffer.alloc(1 << 20, 1),
      });
      expect(upload.statusCode).toBe(201);
      const charges = () =>
        billing.db.selectFrom('storage_charges').selectAll().where('user_id', '=', user.id).execute();
      // Reported twice (a restart, a second instance): one charge.
      await inOnePeriod();
      for (let i = 0; i < 2; i++) expect((await overNats.app.meter!.meter()).failed).toBe(0);
      await expect.poll(charges, { timeout: 30_000 }).toHaveLength(1);
      expect((await charges())[0]).toMatchObject({ bytes: 1 << 20, cost: '0.976562', charged: '0.976562' });

      // Forged: another period of the same user without a token, and with a renter's token: neither is charged.
      const period = { period_start: '2026-01-01T00:00:00.000Z', period_end: '2026-01-01T01:00:00.000Z' };
      const forged = { user_id: user.id, ...period, bytes: 1 << 30 };
      await publisher.publish(`${prefix}.${user.id}`, forged, { msgId: `forged-${suffix}-1` });
      const { tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
      await publisher.publish(`${prefix}.${user.id}`, forged, {
        msgId: `forged-${suffix}-2`,
        headers: { Authorization: `Bearer ${tokens.access_token}` },
      });
      // The storage service's own token, for a period not over when it was sent (a leaked token charging ahead).
      const ahead = Date.now() + 2 * 3_600_000;
      await publisher.publish(
        `${prefix}.${user.id}`,
        {
          user_id: user.id,
          period_start: new Date(ahead - 3_600_000).toISOString(),
          period_end: new Date(ahead).toISOString(),
          bytes: 1 << 30,
        },
        { msgId: `ahead-${suffix}`, headers: { Authorization: `Bearer ${await token.get()}` } },
      );
      // A real report after them is charged: the forged ones were settled (rejected), not left in the way.
      await publisher.publish(
        `${prefix}.${user.id}`,
        { ...forged, period_start: '2026-01-02T00:00:00.000Z', period_end: '2026-01-02T01:00:00.000Z', bytes: 0 },
        { msgId: `real-${suffix}`, headers: { Authorization: `Bearer ${await token.get()}` } },
      );
      await expect.poll(charges, { timeout: 30_000 }).toHaveLength(2);
      const rejected = await consumer.metrics[0]!.get();
      const count = (reason: string) => rejected.values.find((v) => v.labels.reason === reason)?.value ?? 0;
      expect(count('unauthenticated')).toBe(1);
      // The renter's token (not a platform service) and the period ahead.
      expect(count('refused')).toBe(2);
      expect((await charges()).map((c) => new Date(c.period_start).toISOString())).not.toContain(period.period_start);
      expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      await overNats.close();
      await consumer.stop();
      await publisher.close();
    }
  });
});
