/**
 * A migrated billing database on the real test PostgreSQL, the app built on
 * it, and helpers to create and fund wallets through the ledger.
 */

import { signMessage } from '@gpu/client/solana';
import { createLogger, Outbox } from '@gpu/common';
import { type Caller, createTestDatabase, injectAs, startTestIssuer, type TestIssuer } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { afterAll, beforeAll } from 'vitest';
import { billingContext, buildApp } from '../../src/app.ts';
import { type BillingConfig, billingConfigSchema } from '../../src/config.ts';
import { openBillingDatabase } from '../../src/db/open.ts';
import type { Chain } from '../../src/domain/chain/chain.ts';
import { postTransfers } from '../../src/domain/ledger/ledger.ts';
import { Dec } from '../../src/domain/ledger/money.ts';
import type { MarketFactors } from '../../src/domain/pricing/pricing.ts';
import type { ProviderDirectory } from '../../src/domain/provider-directory.ts';
import { settleAutoPayouts } from '../../src/domain/wallets/auto-payout.ts';
import { createWallet } from '../../src/domain/wallets/wallets.ts';
import { ledgerProblems } from './ledger-check.ts';

export interface SetupOptions {
  chain?: Chain | null;
  decimals?: number;
  config?: Record<string, unknown>;
  market?: MarketFactors;
  /** The billing clock (the system clock when absent). */
  now?: () => Date;
  /** Where billing reads machines (else from `provider_registry` in the config: none without its URL). */
  providers?: ProviderDirectory | null;
}

/** The base58 ed25519 signature of `message` by a Solana keypair, as a wallet's sign-message makes it. */
export { signMessage };

let identities: Promise<{ issuer: TestIssuer; admin: Caller }> | undefined;

/**
 * The token issuer the billing apps of a test file trust, and an admin: the caller of the tests that are not about
 * access (over `inject` by default, and with its headers over HTTP).
 */
export function testIdentities(): Promise<{ issuer: TestIssuer; admin: Caller }> {
  identities ??= startTestIssuer().then(async (issuer) => ({ issuer, admin: await issuer.user(['admin']) }));
  return identities;
}

export async function setupBilling(opts: SetupOptions = {}) {
  const testDb = await createTestDatabase('billing');
  const { issuer, admin } = await testIdentities();
  const config: BillingConfig = billingConfigSchema.parse({
    log_level: 'silent',
    access: issuer.accessConfig,
    database: { url: testDb.url, pool_size: 20 },
    blockchain: { token_decimals: opts.decimals ?? 6, commitment: 'finalized' },
    ...opts.config,
    // Tests pay fresh addresses and check the exact amounts they receive: no token account fee unless a test sets one.
    billing: { token_account_fee: '0', ...(opts.config?.billing as object | undefined) },
  });
  const database = await openBillingDatabase(config);
  const logger = createLogger({
    service: 'billing-test',
    instanceId: 'test',
    level: process.env.DEBUG_BILLING ? 'debug' : 'silent',
  });
  const deps = {
    config,
    logger,
    db: database.db,
    chain: opts.chain ?? null,
    outbox: new Outbox(),
    market: opts.market,
    now: opts.now,
    providers: opts.providers,
  };
  const ctx = billingContext(deps);
  const app = await buildApp(deps, ctx);
  await app.ready();
  injectAs(app, admin);
  const db = database.db;

  /**
   * A new wallet (random owner and address unless given) with `funds` credited from chain_incoming; `holderId` is
   * the holding user of a provider wallet (the machine's owner; none unless given).
   */
  async function fundedWallet(
    funds = '0',
    ownerType: 'user' | 'provider' = 'user',
    address?: string,
    who: { ownerId?: string; holderId?: string } = {},
  ) {
    const wallet = await createWallet(db, {
      ownerType,
      ownerId: who.ownerId ?? crypto.randomUUID(),
      solanaAddress: address ?? Keypair.generate().publicKey.toBase58(),
      ...(who.holderId ? { holderId: who.holderId } : {}),
    });
    if (new Dec(funds).gt(0)) await credit(wallet.id, funds);
    return wallet;
  }

  async function credit(walletId: string, amount: string, code = 'test_credit') {
    await db.transaction().execute((trx) =>
      postTransfers(trx, [
        {
          debit: { system: 'chain_incoming' },
          credit: { wallet: walletId, kind: 'available' },
          amount: new Dec(amount),
          code,
        },
      ]),
    );
  }

  /** Checks every ledger invariant (ledger-check.ts); returns the problems and the accounts. */
  const assertLedgerConsistent = () => ledgerProblems(db);

  /** Proves the wallet's address with its keypair (challenge, signature, proof), as its holder would. */
  async function proveAddress(walletId: string, kp: Keypair, headers: Record<string, string> = {}) {
    const challenge = await app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${walletId}/address-challenge`,
      headers,
    });
    if (challenge.statusCode !== 201) throw new Error(`challenge: ${challenge.statusCode} ${challenge.body}`);
    const proof = await app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${walletId}/address-proof`,
      headers,
      payload: { signature: signMessage(kp, challenge.json().message) },
    });
    if (proof.statusCode !== 200) throw new Error(`proof: ${proof.statusCode} ${proof.body}`);
    return proof.json();
  }

  /**
   * The headers of the wallet's holder (a provider for a provider wallet, else a renter): the one caller that may send
   * its money elsewhere than the wallet's own address. A wallet without a holder has none.
   */
  async function holderHeaders(wallet: { holderId: string | null; ownerType: string }) {
    if (!wallet.holderId) throw new Error('the wallet has no holder: make it with one');
    return (await issuer.user([wallet.ownerType === 'provider' ? 'provider' : 'renter'], wallet.holderId)).headers;
  }

  async function balanceOf(walletId: string) {
    const res = await app.inject({ method: 'GET', url: `/api/v1/wallet/${walletId}/balance` });
    return res.json() as { total: string; available: string; locked: string; pending: string };
  }

  return {
    app,
    issuer,
    admin,
    ctx,
    db,
    config,
    fundedWallet,
    credit,
    proveAddress,
    holderHeaders,
    balanceOf,
    assertLedgerConsistent,
    async close() {
      await app.close();
      await app.auditAppended?.();
      // Automatic payouts a session end started in the background (the server's background does this on stop).
      await settleAutoPayouts(ctx);
      await database.close();
      await testDb.drop();
    },
  };
}

export type BillingHarness = Awaited<ReturnType<typeof setupBilling>>;

/**
 * Sets up a billing harness in `beforeAll` and closes it in `afterAll`, for the
 * file or `describe` block it is called in, and returns it. The returned object
 * is filled in when `beforeAll` runs, so use it from tests and hooks only.
 * `opts` may be a function, for options made by earlier setup (a local chain).
 */
export function useBillingHarness(
  opts: SetupOptions | (() => SetupOptions | Promise<SetupOptions>) = {},
): BillingHarness {
  const handle = {} as BillingHarness;
  let harness: BillingHarness | undefined;
  beforeAll(async () => {
    harness = await setupBilling(typeof opts === 'function' ? await opts() : opts);
    Object.assign(handle, harness);
  });
  afterAll(async () => {
    await harness?.close();
  });
  return handle;
}
