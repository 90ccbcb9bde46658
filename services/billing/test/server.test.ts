/**
 * The real service process: starts on a database holding a withdrawal that
 * was debited and recorded but never sent (a crash), reconciles it at
 * start-up, serves, and shuts down cleanly on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '@gpu/common';
import { createTestDatabase, gatherOutput, testEnv } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { afterAll, describe, expect, it } from 'vitest';
import { billingContext } from '../src/app.ts';
import { billingConfigSchema } from '../src/config.ts';
import { openBillingDatabase } from '../src/db/open.ts';
import { getTransaction } from '../src/db/transaction-repository.ts';
import { postTransfers } from '../src/domain/ledger/ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { recordIntent } from '../src/domain/wallets/payouts.ts';
import { createWallet } from '../src/domain/wallets/wallets.ts';
import { setupLocalnet } from './support/localnet.ts';
import { testIdentities } from './support/setup.ts';

let child: ChildProcess | undefined;
afterAll(() => {
  child?.kill('SIGKILL');
});

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

describe('billing-service process', () => {
  it('reconciles a crashed withdrawal at start-up, serves, and exits cleanly', async () => {
    const L = await setupLocalnet();
    const dir = mkdtempSync(join(tmpdir(), 'billing-server-'));
    const keyFile = join(dir, 'treasury.json');
    writeFileSync(keyFile, JSON.stringify(Array.from(L.treasury.secretKey)));
    const testDb = await createTestDatabase('billing_server');

    // The state a crash between "debit recorded" and "sent" leaves behind.
    const config = billingConfigSchema.parse({ log_level: 'silent', database: { url: testDb.url } });
    const database = await openBillingDatabase(config);
    const logger = createLogger({ service: 't', instanceId: 't', level: 'silent' });
    const ctx = billingContext({ config, logger, db: database.db, chain: L.chain });
    const address = Keypair.generate().publicKey.toBase58();
    const wallet = await createWallet(database.db, {
      ownerType: 'user',
      ownerId: crypto.randomUUID(),
      solanaAddress: address,
    });
    await database.db.transaction().execute((trx) =>
      postTransfers(trx, [
        {
          debit: { system: 'chain_incoming' },
          credit: { wallet: wallet.id, kind: 'available' },
          amount: new Dec(20),
          code: 'deposit',
        },
      ]),
    );
    const prepared = await L.chain.prepareTransfer(address, '7');
    const row = await recordIntent(
      ctx,
      { wallet, type: 'withdrawal', amount: new Dec(7), destination: address },
      prepared,
      null,
    );

    const port = await freePort();
    child = spawn(process.execPath, ['--import', 'tsx', 'services/billing/src/server.ts'], {
      cwd: join(import.meta.dirname, '../../..'),
      env: {
        ...process.env,
        DATABASE_URL: testDb.url,
        AUTH_JWKS_URL: (await testIdentities()).issuer.jwksUrl,
        PORT: String(port),
        HOST: '127.0.0.1',
        SOLANA_RPC_URL: testEnv.solanaRpcUrl,
        TOKEN_MINT: L.mint.toBase58(),
        TREASURY_KEYPAIR_PATH: keyFile,
        NATS_URL: testEnv.natsUrl,
        NATS_CREDENTIALS: testEnv.natsCredentials,
        LOG_LEVEL: 'info',
        BILLING__BILLING__RECONCILE_INTERVAL: '0s',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = gatherOutput(child);
    let health: Response | undefined;
    for (let i = 0; i < 150; i++) {
      health = await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined);
      if (health || child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(health?.status, output()).toBe(200);
    expect(await health!.json()).toMatchObject({
      status: 'UP',
      service: 'billing-service',
      checks: {
        database: { status: 'UP' },
        solana: { status: 'UP' },
        nats: { status: 'UP' },
        usage_consumer: { status: 'UP' },
      },
    });

    expect((await getTransaction(database.db, row.id))!.status).toBe('confirmed');
    expect(await L.chain.tokenBalance(address)).toBe('7');
    const balance = await fetch(`http://127.0.0.1:${port}/api/v1/wallet/${wallet.id}/balance`, {
      headers: (await testIdentities()).admin.headers,
    });
    expect(await balance.json()).toMatchObject({ available: '13.000000', pending: '0.000000' });
    // What an operator watches, read when scraped: nothing running, nothing pending, the proof of reserves exported.
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^billing_sessions_running\{[^}]*\} 0$/m);
    expect(metrics).toMatch(/^billing_payouts_pending\{[^}]*\} 0$/m);
    expect(metrics).toMatch(/^billing_outbox_oldest_seconds\{[^}]*\} \d/m);
    expect(metrics).toMatch(/^billing_reserve_ratio\{[^}]*\} /m);
    expect(metrics).toMatch(/^billing_deposits_unclaimed_tokens\{[^}]*\} \d/m);
    expect(metrics).toMatch(/^billing_usage_lag_seconds\{[^}]*\} 0$/m);
    expect(metrics).toMatch(/^billing_gpu_hours_billed_total\{[^}]*\} 0$/m);
    // NATS is on: the consumers' lag, each by its durable name.
    expect(metrics).toMatch(/^billing_consumer_pending\{[^}]*consumer="billing-usage"[^}]*\} \d+$/m);
    // And whether NATS is connected, which the NATS alert reads (billing's /health says 503 while it is not).
    expect(metrics).toMatch(/^nats_connected\{[^}]*\} 1$/m);
    expect(metrics).toMatch(/^billing_payouts_pending_oldest_seconds\{[^}]*\} 0$/m);

    const exited = new Promise<number | null>((r) => child!.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(output()).toContain('reconciled pending withdrawals and payouts');
    // It runs as the test server's superuser: it says it could rewrite its audit trail.
    expect(output()).toMatch(/is a superuser: billing could rewrite its own audit trail/);
    await database.close();
    await testDb.drop();
  });
});
