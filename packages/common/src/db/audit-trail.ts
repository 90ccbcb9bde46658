/**
 * The audit trail of a service (its `audit_events` table, append-only in the database: see auth's migration
 * 20261205000000_audit_trail): appending an event, reading them with filters and keyset paging (oldest first), and
 * the retention purge, the one DELETE the table's trigger lets through.
 */
import { type ColumnType, type Generated, type Kysely, sql } from 'kysely';
import type { Principal } from '../auth/principal.ts';
import type { KeysetPosition } from '../paging.ts';
import { cursorAt, newerThan } from './keyset.ts';

export type AuditOutcome = 'succeeded' | 'refused' | 'failed';

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
}

interface AuditDatabase {
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

/** Appends one event. */
export async function appendAudit<DB extends AuditDatabase>(db: Kysely<DB>, entry: AuditEntry): Promise<void> {
  const d = db as unknown as Kysely<AuditDatabase>;
  await d
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
    .execute();
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

export type AuditEventRow = Omit<AuditEventsTable, 'id' | 'at' | 'details'> & {
  id: string;
  at: Date;
  details: Record<string, unknown>;
  cursor_at: string;
};

/** Events matching `filter`, oldest first, at most `limit` after the position. */
export async function listAudit<DB extends AuditDatabase>(
  db: Kysely<DB>,
  filter: AuditFilter,
): Promise<AuditEventRow[]> {
  let q = (db as unknown as Kysely<AuditDatabase>)
    .selectFrom('audit_events')
    .selectAll()
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

/** Deletes the events older than `before` (the retention setting's purge); how many. */
export async function purgeAudit<DB extends AuditDatabase>(db: Kysely<DB>, before: Date): Promise<number> {
  return (db as unknown as Kysely<AuditDatabase>).transaction().execute(async (trx) => {
    await sql`SELECT set_config('audit.purge', 'on', true)`.execute(trx);
    const result = await trx.deleteFrom('audit_events').where('at', '<', before).executeTakeFirst();
    return Number(result.numDeletedRows);
  });
}
