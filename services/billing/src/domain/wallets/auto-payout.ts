/**
 * Automatic payouts, a provider setting: with it on, a provider wallet's earnings are paid on chain to the chosen
 * owner address as soon as a session on the machine ends and the wallet's available earnings reach
 * `billing.minimum_payout` (the whole available balance, by the same crash-safe path as a requested payout:
 * payouts.ts). A session that ends inside another piece of work (the biller, an offline provider) and an
 * instance that stopped between the end and the payout are caught by the sweep the service runs with its
 * reconciliation (every `billing.reconcile_interval`).
 *
 * Each attempt that moves or fails to move money is in the audit trail as a `payout` with `details.automatic`, by no
 * actor (the service itself), as a payout asked for is by its route. While withdrawals and payouts are paused
 * (domain/reserves/) nothing is attempted.
 *
 * Never paid twice: the payout debits `available` under the wallet's ledger lock before anything is sent, so a
 * second attempt (another instance, the sweep beside a session end) finds the earnings gone and stops
 * (INSUFFICIENT_FUNDS, not an error); within one instance one attempt per wallet runs at a time.
 */
import { type AuditOutcome, appendAudit, auditEventExists, forEachLimited, type Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import {
  findWallet,
  lockAutoPayoutTo,
  recordAutoPayoutOutcome,
  setAutoPayoutTo,
  walletsDueForAutoPayout,
} from '../../db/wallet-repository.ts';
import { billingErrors } from '../../errors.ts';
import { assertMayPayTo, assertProviderOwner } from '../access.ts';
import { chainError } from '../chain/index.ts';
import type { BillingContext } from '../context.ts';
import { Dec, walletBalances } from '../ledger/index.ts';
import { payoutPause } from '../reserves/index.ts';
import { startChainPayout } from './payouts.ts';
import { findProviderAccount, providerAccount, providerWalletOf } from './provider-accounts.ts';
import { toWallet, type Wallet } from './wallets.ts';

/** A provider's automatic payout setting. */
export interface AutoPayoutSetting {
  providerId: string;
  walletId: string;
  /** Where earnings are paid automatically; null: automatic payouts are off. */
  destination: string | null;
  minimumPayout: string;
  /** Why the last automatic payout failed (null: it did not, or the setting was saved since). */
  lastFailure: string | null;
  /** When a failed automatic payout is tried again (null: whenever earnings are due). */
  nextAttemptAt: Date | null;
}

const settingOf = (ctx: BillingContext, providerId: string, wallet: Wallet): AutoPayoutSetting => ({
  providerId,
  walletId: wallet.id,
  destination: wallet.autoPayoutTo,
  minimumPayout: new Dec(ctx.minimumPayout).toFixed(ctx.scale),
  lastFailure: wallet.autoPayoutFailure?.reason ?? null,
  nextAttemptAt: wallet.autoPayoutFailure?.retryAt ?? null,
});

/** The provider's setting, read by whoever may read its earnings. */
export async function autoPayoutSetting(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  correlationId?: string,
): Promise<AutoPayoutSetting> {
  return settingOf(ctx, providerId, await providerAccount(ctx, actor, providerId, 'read', correlationId));
}

/**
 * Turns automatic payouts on (to `destination`, else the wallet's own address) or off, by the wallet's holder (or an
 * admin or a platform service, to the wallet's own address only). With a registry, a machine whose wallet is not open
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
    assertMayPayTo(actor, wallet, address);
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

/**
 * The provider wallet the actor manages: its holder's (checked before anything else), opened on first need for the
 * machine's owner when billing has a registry.
 */
async function providerWalletToManage(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  correlationId?: string,
): Promise<Wallet> {
  const existing = await findProviderAccount(ctx, actor, providerId, 'manage', correlationId);
  if (existing) return existing;
  if (!ctx.providers) throw billingErrors.providerWalletNotFound(providerId);
  const machine = await ctx.providers.provider(providerId, correlationId);
  if (!machine) throw billingErrors.providerNotFound(providerId);
  // The wallet is opened for the owner the registry names now (the check above may have used a remembered owner).
  assertProviderOwner(actor, providerId, machine.ownerId);
  return providerWalletOf(ctx, machine);
}

/** The wait after `failures` automatic payouts failed in a row: a minute, doubling, at most a day. */
export function autoPayoutBackoffMs(failures: number): number {
  return Math.min(60_000 * 2 ** Math.max(0, failures - 1), 24 * 3_600_000);
}

/**
 * Pays the wallet's available earnings to its automatic payout address when they reach the minimum payout; the
 * payout's state (`confirmed`, `pending`, `failed`), or null when nothing was due, the wallet is waiting out earlier
 * failures, or another attempt took the earnings. The address is checked again under the wallet's lock just before
 * the debit, so a setting changed meanwhile (turned off, or moved away from a compromised address) wins. A failed
 * payout (refused destination, transfer failed on chain) is tried again after a backoff (`autoPayoutBackoffMs`), not
 * at every round.
 */
export async function payOutEarnings(
  ctx: BillingContext,
  walletId: string,
  correlationId?: string,
): Promise<string | null> {
  const row = await findWallet(ctx.db, walletId);
  const destination = row?.auto_payout_to;
  if (!row || !destination) return null;
  if (row.auto_payout_retry_at && row.auto_payout_retry_at.getTime() > ctx.now().getTime()) return null;
  const balances = await walletBalances(ctx.db, walletId, ctx.scale);
  const available = new Dec(balances?.available ?? 0);
  if (available.lt(ctx.minimumPayout) || available.lte(0)) return null;
  const failed = (why: string) => backOffAutoPayout(ctx, row, why);
  // The `requested` event, written in the debit's transaction (both or neither): `written` once appended there, and
  // `requested`, which every later event names, once that transaction is known to have committed.
  let written: string | undefined;
  let requested: string | undefined;
  const event = (outcome: AuditOutcome, details: Record<string, unknown>) => ({
    action: 'payout',
    outcome,
    target: `provider:${row.owner_id}`,
    details: {
      automatic: true,
      wallet_id: walletId,
      amount: available.toFixed(ctx.scale),
      destination,
      ...details,
      ...(requested !== undefined ? { requested } : {}),
    },
  });
  const audit = (outcome: AuditOutcome, details: Record<string, unknown>) =>
    appendAudit(ctx.db, event(outcome, details)).catch((err: unknown) =>
      ctx.logger.error({ err, action: 'payout' }, 'appending to the audit trail failed'),
    );
  let paid: Awaited<ReturnType<typeof startChainPayout>>;
  try {
    paid = await startChainPayout(
      ctx,
      {
        wallet: toWallet(row),
        type: 'payout',
        amount: available,
        destination,
        correlationId,
        guard: async (trx) => {
          if ((await lockAutoPayoutTo(trx, walletId)) !== destination) throw billingErrors.autoPayoutChanged(walletId);
        },
        // Last in the debit's transaction: appending holds the trail's one lock until it commits.
        debited: async (trx, pending) => {
          written = await appendAudit(trx as Kysely<BillingDB>, event('requested', { id: pending.id }));
        },
      },
      null,
    );
    requested = written;
  } catch (err) {
    // Written, then failed: at the commit (nothing of it is left) or after it (the debit stands, and its event).
    if (written !== undefined && (await inTrail(ctx, written))) requested = written;
    const code = (err as { code?: string }).code;
    // Another instance (or the sweep) paid these earnings first, or the holder changed the setting meanwhile; or
    // payouts are paused (the sweep pays them once resumed). Nothing happened.
    if (code === 'INSUFFICIENT_FUNDS' || code === 'AUTO_PAYOUT_CHANGED' || code === 'PAYOUTS_PAUSED') return null;
    // The chain out of reach, or a treasury short of what the ledger owes, is not the payout's fault: the next round
    // tries again.
    if (code === 'SOLANA_UNAVAILABLE' || code === 'RESERVES_INSUFFICIENT') {
      await audit('failed', { code });
      throw err;
    }
    await audit(code === 'INVALID_DESTINATION' ? 'refused' : 'failed', { code: code ?? 'INTERNAL' });
    await failed((err as Error).message);
    return 'failed';
  }
  await audit(paid.status === 'failed' ? 'failed' : 'succeeded', { id: paid.id, status: paid.status });
  if (paid.status === 'failed') await failed(paid.failure_reason ?? 'the transfer failed on chain');
  else if (row.auto_payout_failures > 0) await recordAutoPayoutOutcome(ctx.db, walletId, null);
  ctx.logger.info(
    { wallet_id: walletId, amount: paid.amount, status: paid.status, signature: paid.signature },
    'automatic payout',
  );
  return paid.status;
}

/** Whether the audit trail holds the event `id` (a `requested` event whose transaction may have rolled back). */
async function inTrail(ctx: BillingContext, id: string): Promise<boolean> {
  try {
    return await auditEventExists(ctx.db, id);
  } catch {
    return false; // Not known: the event names none (the operators' query lists that request, to be checked).
  }
}

/** Records a failed automatic payout of the wallet: the next attempt waits `autoPayoutBackoffMs` of its failures. */
async function backOffAutoPayout(
  ctx: BillingContext,
  row: { id: string; auto_payout_failures: number },
  why: string,
): Promise<void> {
  const wait = autoPayoutBackoffMs(row.auto_payout_failures + 1);
  await recordAutoPayoutOutcome(ctx.db, row.id, { retryAt: new Date(ctx.now().getTime() + wait), reason: why });
  ctx.logger.warn(
    { wallet_id: row.id, err: why, retry_in_ms: wait, failures: row.auto_payout_failures + 1 },
    'automatic payout failed; will retry after a backoff',
  );
}

/**
 * A payout that failed after its request ended (pending then, settled failed by reconciliation), from a wallet whose
 * automatic payout is on: backed off as a failure seen at once is, so the sweep does not send a transfer that keeps
 * failing again every round (each costs the treasury its fee in SOL). A wallet without automatic payout: nothing.
 */
export async function backOffAfterFailedPayout(ctx: BillingContext, walletId: string, why: string): Promise<void> {
  const row = await findWallet(ctx.db, walletId);
  if (row?.auto_payout_to) await backOffAutoPayout(ctx, row, why);
}

/** Starts the wallet's automatic payout in the background (one per wallet at a time in this instance). */
export function nudgeAutoPayout(ctx: BillingContext, walletId: string, correlationId?: string): Promise<unknown> {
  const running = ctx.state.autoPayouts.get(walletId);
  if (running) return running;
  const attempt = payOutEarnings(ctx, walletId, correlationId)
    .catch((err) =>
      ctx.logger.warn({ wallet_id: walletId, err: (err as Error).message }, 'automatic payout failed; will retry'),
    )
    .finally(() => ctx.state.autoPayouts.delete(walletId));
  ctx.state.autoPayouts.set(walletId, attempt);
  return attempt;
}

/**
 * Pays the wallets whose automatic payout is due, up to `limit` of them, `concurrency` at a time (run every
 * `billing.reconcile_interval`, apart from the reconciliation of pending payouts); how many were tried. Wallets
 * waiting out failures are not due, so they never crowd out the others.
 */
export async function sweepAutoPayouts(ctx: BillingContext, limit = 100, concurrency = 4): Promise<number> {
  if (!ctx.chain || (await payoutPause(ctx))) return 0;
  const due = await walletsDueForAutoPayout(ctx.db, new Dec(ctx.minimumPayout).toFixed(), ctx.now(), limit);
  await forEachLimited(due, concurrency, (wallet) => nudgeAutoPayout(ctx, wallet.id));
  return due.length;
}

/** Waits for this instance's automatic payouts in flight (before it stops). */
export async function settleAutoPayouts(ctx: BillingContext): Promise<void> {
  await Promise.allSettled([...ctx.state.autoPayouts.values()]);
}
