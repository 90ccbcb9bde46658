/**
 * Holds: two-phase transfers on a wallet. A pending hold moves funds from the
 * wallet's `available` to its `locked` account; it is later posted (in full or
 * in part, to any accounts, with the rest released back to `available`) or
 * voided (all released). A pending hold may be extended and may be posted in
 * several captures before it is closed. Every step is a new immutable
 * transfer; the hold row only tracks how much is still held.
 *
 * Each function runs inside the caller's database transaction so that a
 * caller (a rental session, a withdrawal) commits its own rows with the money
 * movement. Lock order: the hold row, then accounts in ID order (ledger.ts).
 * A step (`HoldStep`) carries the domain's time of the step (ctx.now(): the
 * times of its records and of the hold row) and the context's cache of ledger
 * account IDs.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import { findHold, findHolds, type HoldRecord, insertHold, lockHold, updateHold } from '../../db/hold-repository.ts';
import type { BillingDB, HoldStatus } from '../../db/schema.ts';
import { billingErrors } from '../../errors.ts';
import type { BoundedCache } from '../bounded-cache.ts';
import { type AccountRef, lockWalletAvailable, postTransfers } from './ledger.ts';
import { Dec } from './money.ts';

export interface Hold {
  id: string;
  walletId: string;
  status: HoldStatus;
  /** Everything ever held (extensions included). */
  amount: string;
  posted: string;
  released: string;
  /** Still held: amount - posted - released. */
  remaining: string;
  reference: string | null;
}

type Trx = Transaction<BillingDB>;

/** What a hold step takes from its caller: when it happens (the domain's clock) and the cache of account IDs. */
export interface HoldStep {
  /** The time of the step (ctx.now()): its records' and the hold row's. */
  now: Date;
  accountIds?: BoundedCache<string>;
}

/** A hold from its row (`remaining` derived). */
function toHold(row: {
  id: string;
  wallet_id: string;
  status: HoldStatus;
  amount: string;
  posted: string;
  released: string;
  reference: string | null;
}): Hold {
  const amount = new Dec(row.amount);
  const posted = new Dec(row.posted);
  const released = new Dec(row.released);
  return {
    id: row.id,
    walletId: row.wallet_id,
    status: row.status,
    amount: amount.toFixed(),
    posted: posted.toFixed(),
    released: released.toFixed(),
    remaining: amount.minus(posted).minus(released).toFixed(),
    reference: row.reference,
  };
}

async function lockPendingHold(trx: Trx, holdId: string) {
  const row = await lockHold(trx, holdId);
  if (!row) throw billingErrors.holdNotFound(holdId);
  if (row.status !== 'pending') throw billingErrors.holdNotPending(holdId, row.status);
  return row;
}

/** The `lock`/`release` record of a hold step (written with the step, in the same statement). */
function record(
  walletId: string,
  type: 'lock' | 'release',
  amount: Dec,
  holdId: string,
  reference: string | null,
  id: string,
  now: Date,
): HoldRecord {
  return {
    id,
    wallet_id: walletId,
    type,
    status: 'confirmed' as const,
    amount: amount.toFixed(),
    hold_id: holdId,
    reference,
    confirmed_at: now,
    created_at: now,
    updated_at: now,
  };
}

/** Places a pending hold of `amount` on a wallet (INSUFFICIENT_FUNDS when not available). */
export async function createHold(
  trx: Trx,
  walletId: string,
  amount: Dec,
  reference: string | null = null,
  step: HoldStep,
): Promise<Hold> {
  const id = randomUUID();
  const txId = randomUUID();
  // Transfers first: they lock the accounts and refuse an unknown wallet (WALLET_NOT_FOUND) or an overdraft
  // (INSUFFICIENT_FUNDS) before anything is written; their references to the hold and the record are checked at
  // commit.
  await postTransfers(
    trx,
    [
      {
        debit: { wallet: walletId, kind: 'available' },
        credit: { wallet: walletId, kind: 'locked' },
        amount,
        code: 'hold',
        holdId: id,
        transactionId: txId,
      },
    ],
    step.accountIds,
  );
  await insertHold(
    trx,
    { id, walletId, amount: amount.toFixed(), reference, at: step.now },
    record(walletId, 'lock', amount, id, reference, txId, step.now),
  );
  return toHold({
    id,
    wallet_id: walletId,
    status: 'pending',
    amount: amount.toFixed(),
    posted: '0',
    released: '0',
    reference,
  });
}

/** Adds `amount` to a pending hold from the wallet's available balance. */
export async function extendHold(trx: Trx, holdId: string, amount: Dec, step: HoldStep): Promise<Hold> {
  const row = await lockPendingHold(trx, holdId);
  const txId = randomUUID();
  await postTransfers(
    trx,
    [
      {
        debit: { wallet: row.wallet_id, kind: 'available' },
        credit: { wallet: row.wallet_id, kind: 'locked' },
        amount,
        code: 'hold_extend',
        holdId,
        transactionId: txId,
      },
    ],
    step.accountIds,
  );
  const updated = await updateHold(trx, holdId, { addAmount: amount.toFixed(), at: step.now }, [
    record(row.wallet_id, 'lock', amount, holdId, row.reference, txId, step.now),
  ]);
  return toHold(updated);
}

/** One leg of a posting: part of the held funds moved to an account. */
export interface PostingLeg {
  to: AccountRef;
  amount: Dec;
  /** Transfer code, e.g. `session_payment`, `platform_fee`. */
  code: string;
  transactionId?: string | null;
}

/**
 * Posts legs out of a pending hold. With `close`, whatever is left is released
 * back to `available` (recorded as a `release` transaction) and the hold ends
 * `posted`; without it the hold stays pending for later captures.
 * The legs may not exceed what is still held (HOLD_AMOUNT_EXCEEDED).
 */
export async function postHold(
  trx: Trx,
  holdId: string,
  legs: PostingLeg[],
  close: boolean,
  step: HoldStep,
): Promise<Hold> {
  const row = await lockPendingHold(trx, holdId);
  const remaining = new Dec(row.amount).minus(row.posted).minus(row.released);
  const total = legs.reduce((sum, leg) => sum.plus(leg.amount), new Dec(0));
  if (total.gt(remaining)) throw billingErrors.holdExceeded(holdId, remaining.toFixed(), total.toFixed());
  const locked: AccountRef = { wallet: row.wallet_id, kind: 'locked' };
  const specs = legs
    .filter((leg) => leg.amount.gt(0))
    .map((leg) => ({
      debit: locked,
      credit: leg.to,
      amount: leg.amount,
      code: leg.code,
      holdId,
      transactionId: leg.transactionId ?? null,
    }));
  const rest = remaining.minus(total);
  const records: HoldRecord[] = [];
  if (close && rest.gt(0)) {
    const txId = randomUUID();
    records.push(record(row.wallet_id, 'release', rest, holdId, row.reference, txId, step.now));
    specs.push({
      debit: locked,
      credit: { wallet: row.wallet_id, kind: 'available' },
      amount: rest,
      code: 'hold_release',
      holdId,
      transactionId: txId,
    });
  }
  await postTransfers(trx, specs, step.accountIds);
  const updated = await updateHold(
    trx,
    holdId,
    {
      addPosted: total.toFixed(),
      addReleased: close ? rest.toFixed() : '0',
      status: close ? 'posted' : 'pending',
      at: step.now,
    },
    records,
  );
  return toHold(updated);
}

/** Voids a pending hold: everything still held goes back to `available`. */
export async function voidHold(trx: Trx, holdId: string, step: HoldStep): Promise<Hold> {
  const row = await lockPendingHold(trx, holdId);
  const rest = new Dec(row.amount).minus(row.posted).minus(row.released);
  const records: HoldRecord[] = [];
  if (rest.gt(0)) {
    const txId = randomUUID();
    records.push(record(row.wallet_id, 'release', rest, holdId, row.reference, txId, step.now));
    await postTransfers(
      trx,
      [
        {
          debit: { wallet: row.wallet_id, kind: 'locked' },
          credit: { wallet: row.wallet_id, kind: 'available' },
          amount: rest,
          code: 'hold_void',
          holdId,
          transactionId: txId,
        },
      ],
      step.accountIds,
    );
  }
  const updated = await updateHold(
    trx,
    holdId,
    { addReleased: rest.toFixed(), status: 'voided', at: step.now },
    records,
  );
  return toHold(updated);
}

/** Reads several holds, by ID (unknown IDs are absent). */
export async function getHolds(trx: Trx | Kysely<BillingDB>, holdIds: string[]): Promise<Map<string, Hold>> {
  if (holdIds.length === 0) return new Map();
  const rows = await findHolds(trx, holdIds);
  return new Map(rows.map((row) => [row.id, toHold(row)]));
}

/** Reads a hold. */
export async function getHold(trx: Trx | Kysely<BillingDB>, holdId: string): Promise<Hold | null> {
  const row = await findHold(trx, holdId);
  return row ? toHold(row) : null;
}

export interface HoldTopUp {
  /** Still held after the top-up. */
  held: Dec;
  /** Added from the available balance now. */
  added: Dec;
  /** What is left available in the wallet afterwards. */
  available: Dec;
  /** How much of `target` the hold and the wallet could not cover. */
  short: Dec;
}

/**
 * Extends a session's hold from the available balance until it holds `target` (as far as funds go). A session's hold
 * is captured once, when the session ends, so while the session runs it must hold at least what has been billed.
 * Callers hold the session's row lock; this locks the hold, then the renter's accounts.
 */
export async function topUpHold(
  trx: Transaction<BillingDB>,
  session: { id: string; hold_id: string; wallet_id: string },
  target: Dec,
  step: HoldStep,
): Promise<HoldTopUp> {
  // The lock order of every hold step: the hold row, then the wallet's accounts.
  const held = new Dec(toHold(await lockPendingHold(trx, session.hold_id)).remaining);
  const available = await lockWalletAvailable(trx, session.wallet_id);
  const deficit = target.minus(held);
  if (deficit.lte(0)) return { held, added: new Dec(0), available, short: new Dec(0) };
  const added = Dec.min(deficit, available);
  if (added.gt(0)) await extendHold(trx, session.hold_id, added, step);
  return { held: held.plus(added), added, available: available.minus(added), short: deficit.minus(added) };
}
