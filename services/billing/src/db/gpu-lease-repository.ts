/**
 * The GPUs held on machines (`gpu_leases`, migration XIII): by running sessions and by reservations until they
 * expire. Every writer that claims a machine's GPUs (a start, a reservation) or frees a reservation first takes
 * `lockMachineGpus` in its transaction, so the choice of free GPUs and the rows that claim them are one step per
 * machine; the table's key is the backstop (never two holders of one GPU). A session's end deletes its own rows
 * without the lock: freeing a GPU cannot give it to two holders.
 */
import { lockName } from '@gpu/common';
import { type Kysely, sql, type Transaction } from 'kysely';
import type { BillingDB } from './schema.ts';

type Trx = Transaction<BillingDB>;

/** A GPU held on the machine. */
export interface HeldGpu {
  gpu_index: number;
  session_id: string | null;
  reservation_id: string | null;
  user_id: string | null;
  expires_at: Date | null;
  /** The holding session's bid per GPU-hour (interruptible); null: on demand, or a reservation. */
  bid: string | null;
  /** When the holding session started (null: a reservation): of equal bids, the newest is taken back first. */
  started_at: Date | null;
}

/** The machine's lease rows with their holding session's bid and start. */
function leasesOf(db: Kysely<BillingDB>, providerId: string) {
  return db
    .selectFrom('gpu_leases as l')
    .leftJoin('rental_sessions as s', 's.id', 'l.session_id')
    .select(['l.gpu_index', 'l.session_id', 'l.reservation_id', 'l.user_id', 'l.expires_at', 's.bid', 's.started_at'])
    .where('l.provider_id', '=', providerId);
}

/**
 * Serialises the machine's GPU holders until the transaction ends, reads the GPUs held on it, then the time (`at`:
 * read after the holders, so a lease never starts before the end of a holder it saw gone, which committed its end
 * time before this read), and drops the machine's reservations expired by then; the GPUs still held, and how many
 * lapsed reservations' GPUs it dropped.
 */
export async function lockMachineGpus(
  trx: Trx,
  providerId: string,
  clock: () => Date,
): Promise<{ at: Date; held: HeldGpu[]; dropped: number }> {
  await lockName(trx, `gpus:${providerId}`);
  const rows = await leasesOf(trx, providerId).orderBy('l.gpu_index').execute();
  const at = clock();
  const expired = (h: HeldGpu) => h.session_id === null && h.expires_at !== null && h.expires_at <= at;
  if (rows.some(expired)) {
    await trx
      .deleteFrom('gpu_leases')
      .where('provider_id', '=', providerId)
      .where('session_id', 'is', null)
      .where('expires_at', '<=', at)
      .execute();
  }
  const held = rows.filter((h) => !expired(h));
  return { at, held, dropped: rows.length - held.length };
}

/**
 * The next version of billing's statement of the machine's held GPUs (1 for the first). Taken last in the
 * transaction of a change of the machine's leases: the version's row stays locked until the transaction ends, so the
 * statements of one machine are numbered in the order they commit, and each one read after the last commit.
 */
export async function nextLeaseVersion(trx: Trx, providerId: string): Promise<number> {
  const { rows } = await sql<{ version: string }>`
    INSERT INTO machine_lease_versions AS v (provider_id, version) VALUES (${providerId}, 1)
    ON CONFLICT (provider_id) DO UPDATE SET version = v.version + 1
    RETURNING version`.execute(trx);
  return Number(rows[0]!.version);
}

/** The indices of the machine's GPUs held at `at` (running sessions, reservations not lapsed), in index order. */
export async function heldIndices(trx: Trx, providerId: string, at: Date): Promise<number[]> {
  const rows = await trx
    .selectFrom('gpu_leases')
    .select('gpu_index')
    .where('provider_id', '=', providerId)
    .where((eb) => eb.or([eb('session_id', 'is not', null), eb('expires_at', '>', at)]))
    .orderBy('gpu_index')
    .execute();
  return rows.map((r) => r.gpu_index);
}

/** The machine's GPUs that interruptible sessions hold, by index: their bids per GPU-hour. */
export async function heldBids(trx: Trx, providerId: string): Promise<Record<string, string>> {
  const rows = await trx
    .selectFrom('gpu_leases as l')
    .innerJoin('rental_sessions as s', 's.id', 'l.session_id')
    .select(['l.gpu_index', 's.bid'])
    .where('l.provider_id', '=', providerId)
    .where('s.bid', 'is not', null)
    .execute();
  return Object.fromEntries(rows.map((r) => [String(r.gpu_index), r.bid as string]));
}

/** Up to `limit` machines holding a reservation lapsed at `now`. */
export async function machinesWithLapsedReservations(
  db: Kysely<BillingDB>,
  now: Date,
  limit: number,
): Promise<string[]> {
  const rows = await db
    .selectFrom('gpu_leases')
    .select('provider_id')
    .distinct()
    .where('session_id', 'is', null)
    .where('expires_at', '<=', now)
    .limit(limit)
    .execute();
  return rows.map((r) => r.provider_id);
}

/** When the next reservation lapses after `now` (null: none will). */
export async function nextReservationExpiry(db: Kysely<BillingDB>, now: Date): Promise<Date | null> {
  const row = await db
    .selectFrom('gpu_leases')
    .select((eb) => eb.fn.min('expires_at').as('next'))
    .where('session_id', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst();
  return (row?.next as Date | null | undefined) ?? null;
}

/** The GPUs held on the machine now (a plain read, for a quote: no lock, expired reservations left out). */
export async function heldGpus(db: Kysely<BillingDB>, providerId: string, now: Date): Promise<HeldGpu[]> {
  return leasesOf(db, providerId)
    .where((eb) => eb.or([eb('l.session_id', 'is not', null), eb('l.expires_at', '>', now)]))
    .orderBy('l.gpu_index')
    .execute();
}

/** Who holds a lease: a session, or a renter's reservation until it expires. */
export type LeaseHolder = { sessionId: string } | { reservationId: string; userId: string; expiresAt: Date };

/** Writes the leases of `indices` on the machine for `holder` (under `lockMachineGpus`). */
export async function insertLeases(trx: Trx, providerId: string, indices: number[], holder: LeaseHolder) {
  if (indices.length === 0) return;
  const who =
    'sessionId' in holder
      ? { session_id: holder.sessionId, reservation_id: null, user_id: null, expires_at: null }
      : {
          session_id: null,
          reservation_id: holder.reservationId,
          user_id: holder.userId,
          expires_at: holder.expiresAt,
        };
  await trx
    .insertInto('gpu_leases')
    .values(indices.map((gpu_index) => ({ provider_id: providerId, gpu_index, ...who })))
    .execute();
}

/** A reservation's GPUs a session took over: which reservation, for whom, until when. */
export interface TakenReservedGpu {
  reservation_id: string;
  user_id: string;
  expires_at: Date;
  gpu_index: number;
}

/**
 * Frees the reserved GPUs among `indices` on the machine (a session takes them over, under `lockMachineGpus`); the
 * rows it freed.
 */
export async function releaseReservedGpus(
  trx: Trx,
  providerId: string,
  indices: number[],
): Promise<TakenReservedGpu[]> {
  if (indices.length === 0) return [];
  const rows = await trx
    .deleteFrom('gpu_leases')
    .where('provider_id', '=', providerId)
    .where('gpu_index', 'in', indices)
    .where('reservation_id', 'is not', null)
    .returning(['reservation_id', 'user_id', 'expires_at', 'gpu_index'])
    .execute();
  return rows as TakenReservedGpu[];
}

/** Frees the GPUs the session holds (in the transaction that ends it). */
export async function releaseSessionGpus(trx: Trx, sessionId: string): Promise<void> {
  await trx.deleteFrom('gpu_leases').where('session_id', '=', sessionId).execute();
}

/** The machine and GPUs of a reservation (any state), or undefined when none holds GPUs now. */
export async function findReservation(
  trx: Trx | Kysely<BillingDB>,
  reservationId: string,
): Promise<{ provider_id: string; user_id: string; expires_at: Date; gpu_indices: number[] } | undefined> {
  const rows = await trx
    .selectFrom('gpu_leases')
    .select(['provider_id', 'user_id', 'expires_at', 'gpu_index'])
    .where('reservation_id', '=', reservationId)
    .orderBy('gpu_index')
    .execute();
  const first = rows[0];
  if (!first) return undefined;
  return {
    provider_id: first.provider_id,
    user_id: first.user_id!,
    expires_at: first.expires_at!,
    gpu_indices: rows.map((r) => r.gpu_index),
  };
}

/** Frees the reservation's GPUs; the indices it held (none: it held none). */
export async function releaseReservation(trx: Trx, reservationId: string): Promise<number[]> {
  const rows = await trx
    .deleteFrom('gpu_leases')
    .where('reservation_id', '=', reservationId)
    .returning('gpu_index')
    .execute();
  return rows.map((r) => r.gpu_index).sort((a, b) => a - b);
}
