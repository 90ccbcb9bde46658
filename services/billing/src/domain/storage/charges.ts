/**
 * Stored bytes, billed. The storage service measures what each user stores, once per period, and reports it (over
 * NATS or HTTP); billing charges the period here: GB-hours (bytes / 2^30 × the period's hours) at
 * `pricing.storage_rate_per_gb_hour`, rounded once, half-even, to the token's scale, moved from the user's available
 * balance to the platform's revenue (`platform_fees`) in the same transaction as the charge's row and its
 * transaction record.
 *
 * - Exactly once: a user's periods never overlap. A report of a period already charged (the same start and end: a
 *   retry, a redelivery, another storage instance measuring the same period) answers the charge made; one that
 *   overlaps another period is refused (409 STORAGE_PERIOD_OVERLAPS). The check and the charge run under a lock per
 *   user, so concurrent reports charge once.
 * - Balance-checked like sessions: no more than the wallet's available balance is taken; the rest of the cost is
 *   recorded as `unpaid` (all of it for a user without a wallet), never an overdraft.
 * - Debt is collected: each charge first pays what the user's earlier periods left unpaid, oldest first, from the
 *   same available balance, then its own cost; the one payment moves all of it (its amount is the sum), and the
 *   earlier charges show it (`charged` up, `unpaid` down).
 * - Only platform services (the storage service's client) and admins report usage; a user reads their own charges.
 */
import { randomUUID } from 'node:crypto';
import { AppError, errors, isPrivileged, type Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import {
  collectStorageCharge,
  insertStorageCharge,
  listStorageCharges,
  lockUserStorage,
  overlappingCharges,
  type StorageChargeRow,
  unpaidStorageCharges,
} from '../../db/storage-repository.ts';
import { insertTransactions } from '../../db/transaction-repository.ts';
import { findWalletByOwnerRow } from '../../db/wallet-repository.ts';
import type { BillingContext } from '../context.ts';
import { type KeysetPosition, keysetPage, type Page } from '../keyset.ts';
import { Dec, lockWalletAvailable, postTransfers, roundAmount } from '../ledger/index.ts';

export type { StorageChargeRow } from '../../db/storage-repository.ts';

/** What the storage service reports: a user's bytes over one period. */
export interface StorageUsageReport {
  userId: string;
  periodStart: Date;
  periodEnd: Date;
  bytes: number;
}

/** The longest period one report may cover (a day): the meter reports far shorter ones. */
export const MAX_STORAGE_PERIOD_MS = 24 * 3_600_000;
const GIB = new Dec(2).pow(30);
const MS_PER_HOUR = new Dec(3_600_000);

const storageErrors = {
  periodOverlaps: (userId: string, other: StorageChargeRow) =>
    errors.conflict(
      'STORAGE_PERIOD_OVERLAPS',
      `user ${userId}'s storage from ${new Date(other.period_start).toISOString()} to ` +
        `${new Date(other.period_end).toISOString()} is charged already, and overlaps this period`,
    ),
  mayNotReport: () => errors.forbidden('only platform services report storage usage', 'ROLE_REQUIRED'),
  periodNotOver: (periodEnd: Date, sentAt: Date) =>
    new AppError(
      'invalid',
      'STORAGE_PERIOD_NOT_OVER',
      `the period ends at ${periodEnd.toISOString()}, after the report was sent (${sentAt.toISOString()})`,
      { errors: [{ path: 'body.period_end', message: 'must not be later than the report' }] },
    ),
};

/** GB-hours of `bytes` over `ms` (exact), and their cost at `rate` (rounded once to the scale). */
function storageCost(bytes: number, ms: number, rate: string, scale: number): { gbHours: Dec; cost: Dec } {
  const gbHours = new Dec(bytes).mul(ms).div(GIB).div(MS_PER_HOUR);
  return { gbHours, cost: roundAmount(gbHours.mul(rate), scale) };
}

/** Charges one report; the charge, and whether this call made it (false: it had been charged before). */
export async function chargeStorage(
  ctx: BillingContext,
  actor: Principal,
  report: StorageUsageReport,
  sentAt: Date = ctx.now(),
): Promise<{ charge: StorageChargeRow; created: boolean }> {
  if (!isPrivileged(actor)) throw storageErrors.mayNotReport();
  const { userId, periodStart, periodEnd, bytes } = report;
  // Only a period that is over can be measured: one that ends later than the report was sent is refused (a leaked
  // token must not charge periods ahead, nor make the true report of one conflict).
  // The storage service's clock may run ahead of billing's as a daemon's may: the same allowance (max_clock_skew).
  if (periodEnd.getTime() > sentAt.getTime() + ctx.sessions.maxClockSkewMs) {
    throw storageErrors.periodNotOver(periodEnd, sentAt);
  }
  const rate = ctx.pricing.storageRatePerGbHour;
  const { gbHours, cost } = storageCost(bytes, periodEnd.getTime() - periodStart.getTime(), rate, ctx.scale);
  return ctx.db.transaction().execute(async (trx) => {
    await lockUserStorage(trx, userId);
    const overlapping = await overlappingCharges(trx, userId, periodStart, periodEnd);
    const same = overlapping.find(
      (c) =>
        new Date(c.period_start).getTime() === periodStart.getTime() &&
        new Date(c.period_end).getTime() === periodEnd.getTime(),
    );
    if (same) return { charge: same, created: false };
    if (overlapping.length > 0) throw storageErrors.periodOverlaps(userId, overlapping[0]!);

    const wallet = await findWalletByOwnerRow(trx, 'user', userId);
    let charged = new Dec(0);
    let transactionId: string | null = null;
    const collected: { id: string; amount: Dec }[] = [];
    if (wallet) {
      const debts = await unpaidStorageCharges(trx, userId);
      if (cost.gt(0) || debts.length > 0) {
        let left = await lockWalletAvailable(trx, wallet.id);
        for (const debt of debts) {
          const amount = Dec.min(new Dec(debt.unpaid), left);
          if (amount.lte(0)) break;
          collected.push({ id: debt.id, amount });
          left = left.minus(amount);
        }
        charged = Dec.min(cost, left);
      }
    }
    const paid = collected.reduce((sum, c) => sum.plus(c.amount), charged);
    if (wallet && paid.gt(0)) {
      transactionId = randomUUID();
      const id = transactionId;
      await insertTransactions(trx, [
        {
          id,
          wallet_id: wallet.id,
          type: 'payment',
          status: 'confirmed',
          amount: paid.toFixed(),
          // All of it is the platform's: storage has no provider share.
          fee: paid.toFixed(),
          reference: `storage:${userId}:${periodStart.toISOString()}`,
          confirmed_at: ctx.now(),
        },
      ]);
      await postTransfers(
        trx,
        [
          {
            debit: { wallet: wallet.id, kind: 'available' },
            credit: { system: 'platform_fees' },
            amount: paid,
            code: 'storage',
            transactionId: id,
          },
        ],
        ctx.state.accountIds,
      );
    }
    for (const c of collected) await collectStorageCharge(trx, c.id, c.amount.toFixed());
    const charge = await insertStorageCharge(trx, {
      id: randomUUID(),
      user_id: userId,
      wallet_id: wallet?.id ?? null,
      period_start: periodStart,
      period_end: periodEnd,
      bytes,
      // Shown to 12 decimals; the cost comes from the exact value.
      gb_hours: gbHours.toDecimalPlaces(12).toFixed(),
      rate_per_gb_hour: rate,
      cost: cost.toFixed(),
      charged: charged.toFixed(),
      unpaid: cost.minus(charged).toFixed(),
      transaction_id: transactionId,
    });
    if (cost.gt(charged)) {
      ctx.logger.warn(
        { user_id: userId, cost: cost.toFixed(), charged: charged.toFixed() },
        'storage cost exceeds what the user can pay; the rest is recorded unpaid',
      );
    }
    return { charge, created: true };
  });
}

export interface StorageChargeQuery {
  userId?: string;
  from?: Date;
  to?: Date;
  limit: number;
  after?: KeysetPosition;
}

/**
 * Storage charges, newest period first, keyset-paged. A user sees their own only (whatever `userId` says: another
 * user's is 403); admins and services see anyone's, everyone's without `userId`.
 */
export async function storageCharges(
  db: Kysely<BillingDB>,
  actor: Principal,
  q: StorageChargeQuery,
): Promise<Page<StorageChargeRow>> {
  let userId = q.userId;
  if (!isPrivileged(actor)) {
    if (actor.kind !== 'user')
      throw errors.forbidden("storage charges are read with the user's own token", 'ROLE_REQUIRED');
    if (userId !== undefined && userId !== actor.subject) {
      throw errors.forbidden("another user's storage charges", 'NOT_WALLET_HOLDER');
    }
    userId = actor.subject;
  }
  return keysetPage(await listStorageCharges(db, { userId, from: q.from, to: q.to }, q.after, q.limit + 1), q.limit);
}
