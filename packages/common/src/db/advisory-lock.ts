/** Transaction-scoped advisory locks on names: they serialise work on something that has no row to lock (yet). */
import { type QueryExecutorProvider, sql } from 'kysely';

/** A transaction (a pool's statement would let go of a transaction-scoped lock at once). */
type Transaction = QueryExecutorProvider & { readonly isTransaction: true };

/**
 * Holds the advisory lock of `name` until the transaction ends, waiting for whoever holds it: the lock of the name's
 * 64-bit hash (`hashtextextended`), so two names practically never share one. Name the kind of thing first
 * (`rates:<provider>`): the same words in two places are one lock.
 */
export async function lockName(trx: Transaction, name: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${name}, 0))`.execute(trx);
}
