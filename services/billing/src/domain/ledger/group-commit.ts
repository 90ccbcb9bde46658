/**
 * Group commit of ledger transfers. A caller that posts a group of transfers on
 * its own (not with other rows in its own transaction) submits it here; while
 * one batch is in the database, new groups queue, and everything queued (up to
 * 256 groups) goes out as the next batch: one `ledger_post_groups` statement,
 * one commit, however many groups (migration 0009). The batches of a context
 * share one connection while any are in flight, so they run one after another
 * in the order they were formed; the next batch is formed while one runs and
 * waits at the connection, so the database goes on to it at once instead of
 * waiting for the callers of the one before to come back.
 *
 * Each group keeps the meaning of one `postTransfers` call: it is all or
 * nothing, refused with INSUFFICIENT_FUNDS naming the wallet when it would
 * overdraw one, and it sees the groups submitted before it (in submission
 * order, also within a batch: a group covered only by an earlier group's
 * credit posts). A refused group leaves the rest of its batch alone. Should the
 * statement itself fail with an error of its own (a constraint, a trigger, an
 * overflow: perhaps one group's doing), nothing of the batch is written and its
 * groups are posted again one statement each, in order, so that the error fails
 * only the group that causes it. Should the connection fail, every group of the
 * batch fails with that error; nothing was written unless the connection was
 * lost after the commit, which the callers cannot tell (a caller that retries
 * needs an idempotency key of its own). A
 * deadlock or serialization failure, after which nothing was written, is tried
 * again.
 */
import { GroupCommit, type GroupCommitStats, isLockConflict, withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import {
  postLedgerGroups,
  resetSessionTimeouts,
  setSessionTimeouts,
  type TransferRow,
} from '../../db/ledger-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import type { BillingContext } from '../context.ts';
import {
  insufficientFunds,
  type PostedTransfer,
  postedTransfers,
  refusedAmounts,
  type TransferSpec,
  transferRows,
} from './ledger.ts';

/** Most groups in one statement. */
const MAX_BATCH = 256;
/** Most groups waiting for a batch: one more is refused with 503 OVERLOADED (the database does not keep up). */
const MAX_QUEUED = 10_000;
/**
 * How long a batch waits for an account's lock, and how long its statement may run, before it fails (with every
 * group of the batch, nothing written): a batch stuck behind a long transaction would hold up every group after it.
 */
const LOCK_TIMEOUT = '5s';
const STATEMENT_TIMEOUT = '30s';

/** What group commit needs of a billing context: its database and its state (the batcher lives there). */
export type LedgerContext = Pick<BillingContext, 'db' | 'state'>;

/** The transfer batcher of a context, made on first use. */
function batcher(ctx: LedgerContext): GroupCommit<TransferRow[], null> {
  if (!ctx.state.transferBatcher) {
    const connection = new BatchConnection(ctx.db);
    ctx.state.transferBatcher = new GroupCommit((groups) => postBatch(connection, groups), {
      maxBatch: MAX_BATCH,
      // One batch in the database and the next one waiting behind it on the same connection: groups are applied
      // in the order they were submitted, and the database never waits for this process between two batches.
      maxInFlight: 2,
      maxQueued: MAX_QUEUED,
    });
  }
  return ctx.state.transferBatcher;
}

/**
 * One connection from the pool, held while any batch is in flight and given back when none is. Statements sent
 * on one connection run one after another, in the order they were sent. After a failed statement the next batches
 * take a fresh connection (the failure may have been the connection's), while those already waiting on the old one
 * finish there.
 */
class BatchConnection {
  private current: { connection: Promise<HeldConnection>; users: number } | null = null;

  constructor(private readonly db: Kysely<BillingDB>) {}

  async run<T>(fn: (db: Kysely<BillingDB>) => Promise<T>): Promise<T> {
    this.current ??= { connection: this.hold(), users: 0 };
    const held = this.current;
    held.users++;
    try {
      return await fn((await held.connection).db);
    } catch (err) {
      if (this.current === held) this.current = null;
      throw err;
    } finally {
      if (--held.users === 0) {
        if (this.current === held) this.current = null;
        await held.connection.then(
          (c) => c.release(),
          () => {},
        );
      }
    }
  }

  /**
   * Takes a connection from the pool until `release` is called, with the batch statement's lock and statement
   * timeouts set for as long as it is held (reset before it goes back to the pool).
   */
  private hold(): Promise<HeldConnection> {
    return new Promise((resolve, reject) => {
      this.db
        .connection()
        .execute(async (db) => {
          await setSessionTimeouts(db, LOCK_TIMEOUT, STATEMENT_TIMEOUT);
          await new Promise<void>((release) => resolve({ db, release }));
          await resetSessionTimeouts(db).catch(() => {});
        })
        .catch(reject);
    });
  }
}

interface HeldConnection {
  db: Kysely<BillingDB>;
  release: () => void;
}

/**
 * Posts a group of transfers atomically, on its own, in one statement and one commit with the groups that
 * arrive at the same time. Refusals are those of `postTransfers` (INSUFFICIENT_FUNDS naming the wallet,
 * WALLET_NOT_FOUND), for this group alone. Not for transfers that must commit with other rows: those go through
 * `postTransfers` in the caller's transaction.
 */
export async function postTransferGroup(ctx: LedgerContext, specs: TransferSpec[]): Promise<PostedTransfer[]> {
  if (specs.length === 0) return [];
  const rows = await transferRows(ctx.db, specs, ctx.state.accountIds);
  // The database refuses a transfer from an account to itself for the whole statement; refuse it here, so that
  // it fails this group alone.
  for (const r of rows) {
    if (r.debit_account_id === r.credit_account_id) throw new Error(`transfer to its own account: ${r.code}`);
  }
  await batcher(ctx).submit(rows);
  return postedTransfers(rows);
}

/** Batches and groups this context's transfer batcher has sent so far (zeros before the first). */
export function transferGroupStats(ctx: LedgerContext): GroupCommitStats {
  return ctx.state.transferBatcher?.stats ?? { batches: 0, items: 0, largestBatch: 0, held: 0 };
}

/**
 * Posts a batch of groups in one statement: null for a posted group, the error of a refused one. A statement error
 * of the statement's own (not the connection's) posts the groups again one by one, in order, so that it fails only
 * the group that causes it.
 */
async function postBatch(connection: BatchConnection, groups: TransferRow[][]): Promise<(null | Error)[]> {
  const post = (batch: TransferRow[][]) =>
    connection.run((db) => withRetry(() => postLedgerGroups(db, batch), { attempts: 3, retryable: isLockConflict }));
  try {
    return outcomes(groups, await post(groups));
  } catch (err) {
    if (groups.length === 1 || !isStatementError(err)) throw err;
    const results: (null | Error)[] = [];
    for (const group of groups) {
      try {
        results.push(outcomes([group], await post([group]))[0] ?? null);
      } catch (alone) {
        results.push(alone as Error);
      }
    }
    return results;
  }
}

/** Each group's outcome from the refusals `ledger_post_groups` answered. */
function outcomes(groups: TransferRow[][], refused: Awaited<ReturnType<typeof postLedgerGroups>>): (null | Error)[] {
  const results: (null | Error)[] = groups.map(() => null);
  for (const r of refused) {
    results[r.group_index] = r.refusal === 'BL402' ? insufficientFunds(r) : refusedAmounts(r.message);
  }
  return results;
}

/**
 * An error the database raised for the statement itself (a constraint, a trigger, an overflow), after which the
 * statement was rolled back; not one of the connection (class 08), of the server going away or out of resources
 * (57, 53, 58, XX), nor a lock conflict already retried (40) or a lock not had in time (55: lock_timeout).
 */
function isStatementError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !/^(08|40|53|55|57|58|XX)/.test(code);
}
