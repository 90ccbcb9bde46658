/**
 * A session's hold: it is captured once, when the session ends, so while the
 * session runs it must hold at least what has been billed. Callers hold the
 * session's row lock; this locks the renter's accounts, then the hold.
 */
import type { Transaction } from 'kysely';
import type { BillingDB } from '../db/schema.ts';
import type { BoundedCache } from './bounded-cache.ts';
import { extendHold, getHold } from './holds.ts';
import { lockWalletAvailable } from './ledger.ts';
import { Dec } from './money.ts';
import type { SessionRow } from './sessions.ts';

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

/** Extends the session's hold from the available balance until it holds `target` (as far as funds go). */
export async function topUpHold(
  trx: Transaction<BillingDB>,
  session: SessionRow,
  target: Dec,
  accountIds?: BoundedCache<string>,
): Promise<HoldTopUp> {
  const hold = await getHold(trx, session.hold_id);
  if (!hold) throw new Error(`session ${session.id} has no hold ${session.hold_id}`);
  const held = new Dec(hold.remaining);
  const available = await lockWalletAvailable(trx, session.wallet_id);
  const deficit = target.minus(held);
  if (deficit.lte(0)) return { held, added: new Dec(0), available, short: new Dec(0) };
  const added = Dec.min(deficit, available);
  if (added.gt(0)) await extendHold(trx, session.hold_id, added, accountIds);
  return { held: held.plus(added), added, available: available.minus(added), short: deficit.minus(added) };
}
