/**
 * The audit trail of a service (its `audit_events` table, append-only in the database and chained by hash: see
 * audit-table.ts and audit-chain.ts): appending an event, reading them with filters and keyset paging (oldest first),
 * the retention the database enforces, and the retention purge, the one DELETE the table's triggers let through (and
 * only to a role allowed to delete: db/roles.ts). Checking the chain is audit-verify.ts.
 */
import { type ColumnType, type Generated, type Kysely, type QueryExecutorProvider, sql } from 'kysely';
import type { Principal } from '../auth/principal.ts';
import type { KeysetPosition } from '../paging.ts';
import { cursorAt, newerThan } from './keyset.ts';

/**
 * How an action ended: `succeeded`, `refused` (the caller's fault or not allowed), `failed` (the service's fault), or
 * `requested`: written before a handler acts (billing's money routes, http/audit-hook.ts), its outcome a later event.
 */
export type AuditOutcome = 'requested' | 'succeeded' | 'refused' | 'failed';

export interface AuditEventsTable {
  id: Generated<string>;
  at: ColumnType<Date, Date | string | undefined, never>;
  /** What was done: `api_key_created`, `roles_changed`, `password_reset`, ... */
  action: string;
  outcome: AuditOutcome;
  /** Who: a user's or a machine client's ID (none for an anonymous caller, such as a reset by mailed code). */
  actor_id: string | null;
  actor_kind: 'user' | 'client' | null;
  /** The credential it used beyond its identity: an API key's ID. */
  actor_credential: string | null;
  /** The client's address. */
  address: string | null;
  /** What it was done to: `user:<id>`, `api_key:<id>`, `client:<id>`. */
  target: string | null;
  details: ColumnType<Record<string, unknown>, string | undefined, never>;
  request_id: string | null;
  /** The event's place in the chain (1, 2, 3, …), set by the database as it joins the chain. */
  seq: ColumnType<number, never, never>;
  /** The previous event's hash, and this one's (audit-chain.ts), set by the database. */
  prev_hash: ColumnType<Uint8Array, never, never>;
  hash: ColumnType<Uint8Array, never, never>;
}

/** The chain's head, its anchor (the newest purged event) and the retention the database enforces (one row). */
export interface AuditChainTable {
  id: Generated<boolean>;
  head_seq: ColumnType<number, never, never>;
  head_hash: ColumnType<Uint8Array, never, never>;
  anchor_seq: ColumnType<number, never, never>;
  anchor_hash: ColumnType<Uint8Array, never, never>;
  retention: ColumnType<string | null, never, string | null>;
}

/** A service's database as the trail's writers and readers see it. */
interface AuditEventsDatabase {
  audit_events: AuditEventsTable;
}

export interface AuditEntry {
  action: string;
  outcome?: AuditOutcome;
  actor?: { id: string; kind: 'user' | 'client'; credential?: string | null } | null;
  address?: string | null;
  target?: string | null;
  details?: Record<string, unknown>;
  requestId?: string | null;
}

/** Who a principal is, as an event names them: its subject, user or machine client, and the API key it used. */
export function auditActor(p: Principal): NonNullable<AuditEntry['actor']> {
  return { id: p.subject, kind: p.kind, credential: p.keyId ?? null };
}

/** Appends one event; its ID. */
export async function appendAudit<DB extends AuditEventsDatabase>(db: Kysely<DB>, entry: AuditEntry): Promise<string> {
  const d = db as unknown as Kysely<AuditEventsDatabase>;
  const { id } = await d
    .insertInto('audit_events')
    .values({
      action: entry.action,
      outcome: entry.outcome ?? 'succeeded',
      actor_id: entry.actor?.id ?? null,
      actor_kind: entry.actor?.kind ?? null,
      actor_credential: entry.actor?.credential ?? null,
      address: entry.address ?? null,
      target: entry.target ?? null,
      details: JSON.stringify(entry.details ?? {}),
      request_id: entry.requestId ?? null,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return id;
}

/** Whether the trail holds the event `id` (one appended in a transaction that may have rolled back). */
export async function auditEventExists<DB extends AuditEventsDatabase>(db: Kysely<DB>, id: string): Promise<boolean> {
  const d = db as unknown as Kysely<AuditEventsDatabase>;
  return (await d.selectFrom('audit_events').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;
}

export interface AuditFilter {
  action?: string;
  actorId?: string;
  target?: string;
  outcome?: AuditOutcome;
  from?: Date;
  to?: Date;
  after?: KeysetPosition;
  limit: number;
}

export type AuditEventRow = Omit<AuditEventsTable, 'id' | 'at' | 'details' | 'seq' | 'prev_hash' | 'hash'> & {
  id: string;
  at: Date;
  seq: number;
  details: Record<string, unknown>;
  cursor_at: string;
};

/** What a listing shows of an event (not its hashes: the verification checks them). */
const LISTED = [
  'id',
  'at',
  'seq',
  'action',
  'outcome',
  'actor_id',
  'actor_kind',
  'actor_credential',
  'address',
  'target',
  'details',
  'request_id',
] as const;

/** Events matching `filter`, oldest first, at most `limit` after the position. */
export async function listAudit<DB extends AuditEventsDatabase>(
  db: Kysely<DB>,
  filter: AuditFilter,
): Promise<AuditEventRow[]> {
  let q = (db as unknown as Kysely<AuditEventsDatabase>)
    .selectFrom('audit_events')
    .select(LISTED)
    .select(cursorAt('at').as('cursor_at'));
  if (filter.action) q = q.where('action', '=', filter.action);
  if (filter.actorId) q = q.where('actor_id', '=', filter.actorId);
  if (filter.target) q = q.where('target', '=', filter.target);
  if (filter.outcome) q = q.where('outcome', '=', filter.outcome);
  if (filter.from) q = q.where('at', '>=', filter.from);
  if (filter.to) q = q.where('at', '<', filter.to);
  if (filter.after) q = q.where(newerThan('at', filter.after));
  const rows = await q.orderBy('at').orderBy('id').limit(filter.limit).execute();
  return rows as unknown as AuditEventRow[];
}

/**
 * The retention the database enforces (audit-chain.ts): no event younger than `retentionMs` can be deleted, by
 * anyone; 0: none can. Written by the service's migration step, as the table's owner (db/roles.ts).
 */
export async function setAuditRetention(db: QueryExecutorProvider, retentionMs: number): Promise<void> {
  const keep = retentionMs > 0 ? `${retentionMs} milliseconds` : null;
  await sql`UPDATE audit_chain SET retention = ${keep}::interval`.execute(db);
}

/**
 * Deletes the events older than the retention the database holds (its clock decides), from the start of the chain;
 * how many. Only a role allowed to delete from the table can (the purge role of `audit.purge_url` in a production
 * set-up).
 */
export async function purgeAudit(db: QueryExecutorProvider): Promise<number> {
  const result = await sql`
    DELETE FROM audit_events WHERE at < now() - (SELECT retention FROM audit_chain)`.execute(db);
  return Number(result.numAffectedRows ?? 0);
}

/** The chain's newest event (0 and the zero hash when none ever joined), for the log: an anchor kept elsewhere. */
export async function auditChainHead(db: QueryExecutorProvider): Promise<{ seq: number; hash: string }> {
  const { rows } = await sql<{ seq: number; hash: string }>`
    SELECT head_seq::float8 AS seq, encode(head_hash, 'hex') AS hash FROM audit_chain`.execute(db);
  return rows[0]!;
}
