/**
 * Automatic payouts, a provider setting: with it on, a provider wallet's earnings are paid on chain to the chosen
 * owner address as soon as a session on the machine ends and the wallet's available earnings reach
 * `billing.minimum_payout` (the whole available balance, by the same crash-safe path as a requested payout:
 * chain-payouts.ts). A session that ends inside another piece of work (the biller, an offline provider) and an
 * instance that stopped between the end and the payout are caught by the sweep the service runs with its
 * reconciliation (every `billing.reconcile_interval`).
 *
 * Never paid twice: the payout debits `available` under the wallet's ledger lock before anything is sent, so a
 * second attempt (another instance, the sweep beside a session end) finds the earnings gone and stops
 * (INSUFFICIENT_FUNDS, not an error); within one instance one attempt per wallet runs at a time.
 */
import type { Principal } from '@gpu/common';
import { findWallet, setAutoPayoutTo, walletsDueForAutoPayout } from '../db/wallet-repository.ts';
import { billingErrors } from '../errors.ts';
import { assertMayReadEarnings, assertProviderOwner, assertWalletHolder } from './access.ts';
import { chainError } from './chain-errors.ts';
import { startChainPayout } from './chain-payouts.ts';
import type { BillingContext } from './context.ts';
import { walletBalances } from './ledger.ts';
import { Dec } from './money.ts';
import { providerWalletOf } from './rented-machine.ts';
import { findWalletByOwner, toWallet, type Wallet } from './wallets.ts';

/** A provider's automatic payout setting. */
export interface AutoPayoutSetting {
  providerId: string;
  walletId: string;
  /** Where earnings are paid automatically; null: automatic payouts are off. */
  destination: string | null;
  minimumPayout: string;
}

const settingOf = (ctx: BillingContext, providerId: string, wallet: Wallet): AutoPayoutSetting => ({
  providerId,
  walletId: wallet.id,
  destination: wallet.autoPayoutTo,
  minimumPayout: ctx.minimumPayout,
});

/** The provider's setting, read by whoever may read its earnings. */
export async function autoPayoutSetting(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
): Promise<AutoPayoutSetting> {
  const wallet = await findWalletByOwner(ctx.db, 'provider', providerId);
  if (!wallet) throw billingErrors.providerWalletNotFound(providerId);
  assertMayReadEarnings(actor, wallet);
  return settingOf(ctx, providerId, wallet);
}

/**
 * Turns automatic payouts on (to `destination`, else the wallet's own address) or off, by the wallet's holder (or an
 * admin; a platform service only to the wallet's own address). With a registry, a machine whose wallet is not open
 * yet gets it now, for its owner. Earnings already due are paid at once.
 */
export async function setAutoPayout(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  change: { enabled: boolean; destination?: string; correlationId?: string },
): Promise<AutoPayoutSetting> {
  const wallet = await providerWalletToManage(ctx, actor, providerId, change.correlationId);
  let address: string | null = null;
  if (change.enabled) {
    address = change.destination ?? wallet.solanaAddress;
    if (!address) throw billingErrors.destinationRequired(wallet.id);
    if (actor.kind === 'client' && address !== wallet.solanaAddress) {
      throw billingErrors.destinationNotAllowed(address);
    }
    if (!ctx.chain) throw billingErrors.chainNotConfigured();
    let problem: Awaited<ReturnType<typeof ctx.chain.destinationProblem>>;
    try {
      problem = await ctx.chain.destinationProblem(address);
    } catch (err) {
      throw chainError(err);
    }
    if (problem) throw billingErrors.unfitDestination(address, problem);
  }
  const updated = toWallet(await setAutoPayoutTo(ctx.db, wallet.id, address));
  if (address) nudgeAutoPayout(ctx, wallet.id);
  return settingOf(ctx, providerId, updated);
}

/** The provider wallet the actor manages: its holder's (checked), opened on first need when billing has a registry. */
async function providerWalletToManage(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  correlationId?: string,
): Promise<Wallet> {
  const existing = await findWalletByOwner(ctx.db, 'provider', providerId);
  if (existing) {
    assertWalletHolder(actor, existing);
    return existing;
  }
  if (!ctx.providers) throw billingErrors.providerWalletNotFound(providerId);
  const machine = await ctx.providers.provider(providerId, correlationId);
  if (!machine) throw billingErrors.providerNotFound(providerId);
  assertProviderOwner(actor, providerId, machine.ownerId);
  return providerWalletOf(ctx, machine);
}

/**
 * Pays the wallet's available earnings to its automatic payout address when they reach the minimum payout; the
 * payout's state (`confirmed`, `pending`, `failed`), or null when nothing was due (or another attempt took it).
 */
export async function payOutEarnings(ctx: BillingContext, walletId: string): Promise<string | null> {
  const row = await findWallet(ctx.db, walletId);
  if (!row?.auto_payout_to) return null;
  const balances = await walletBalances(ctx.db, walletId, ctx.scale);
  const available = new Dec(balances?.available ?? 0);
  if (available.lt(ctx.minimumPayout) || available.lte(0)) return null;
  try {
    const paid = await startChainPayout(
      ctx,
      { wallet: toWallet(row), type: 'payout', amount: available, destination: row.auto_payout_to },
      null,
    );
    ctx.logger.info(
      { wallet_id: walletId, amount: paid.amount, status: paid.status, signature: paid.signature },
      'automatic payout',
    );
    return paid.status;
  } catch (err) {
    // Another instance (or the sweep) paid these earnings first.
    if ((err as { code?: string }).code === 'INSUFFICIENT_FUNDS') return null;
    throw err;
  }
}

/** Starts the wallet's automatic payout in the background (one per wallet at a time in this instance). */
export function nudgeAutoPayout(ctx: BillingContext, walletId: string): Promise<unknown> {
  const running = ctx.state.autoPayouts.get(walletId);
  if (running) return running;
  const attempt = payOutEarnings(ctx, walletId)
    .catch((err) =>
      ctx.logger.warn({ wallet_id: walletId, err: (err as Error).message }, 'automatic payout failed; will retry'),
    )
    .finally(() => ctx.state.autoPayouts.delete(walletId));
  ctx.state.autoPayouts.set(walletId, attempt);
  return attempt;
}

/** Pays every wallet whose automatic payout is due (run with the reconciliation); how many were tried. */
export async function sweepAutoPayouts(ctx: BillingContext, limit = 100): Promise<number> {
  if (!ctx.chain) return 0;
  const due = await walletsDueForAutoPayout(ctx.db, new Dec(ctx.minimumPayout).toFixed(), limit);
  for (const w of due) await nudgeAutoPayout(ctx, w.id);
  return due.length;
}

/** Waits for this instance's automatic payouts in flight (before it stops). */
export async function settleAutoPayouts(ctx: BillingContext): Promise<void> {
  await Promise.allSettled([...ctx.state.autoPayouts.values()]);
}
