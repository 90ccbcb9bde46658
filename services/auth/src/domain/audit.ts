/**
 * The auth service's audit trail: each security-relevant action (API keys and clients created, rotated, revoked or
 * refused; SSH keys added or removed; roles changed; passwords changed or reset; devices signed out, logouts, a spent
 * refresh token presented again; addresses verified; NATS users refused) is logged and appended
 * to `audit_events` (append-only in the database) with who did it, from which address, in which request, and the
 * outcome. Admins read it at `GET /api/v1/auth/audit`; `audit.retention` says how long it is kept.
 *
 * A change and its event are one transaction (`auditedChange`): neither commits without the other, so a failed append
 * fails the change, and a crash between them loses nothing. What changes nothing (a refusal) is appended on its own
 * (`audit`): a failure there is logged.
 */
import { type AuditOutcome, appendAudit, auditActor, type Principal } from '@gpu/common';
import { sql, type Transaction } from 'kysely';
import type { AuthDatabase } from '../db/schema.ts';
import type { AuthContext } from './context.ts';

export interface AuditEvent {
  action: string;
  outcome?: AuditOutcome;
  /** Who did it: a principal, a user known otherwise (a reset by mailed code), or nobody known. */
  actor?: Principal | { id: string; kind: 'user' | 'client'; credential?: string } | null;
  target?: string | null;
  details?: Record<string, unknown>;
  /** The client's address when the context carries no request (the token endpoint passes its own). */
  address?: string;
}

const actorOf = (actor: AuditEvent['actor']) => (actor && 'subject' in actor ? auditActor(actor) : (actor ?? null));

/** The event's row in the trail and its log line. */
function entryOf(ctx: AuthContext, event: AuditEvent) {
  const actor = actorOf(event.actor);
  const outcome = event.outcome ?? 'succeeded';
  const address = event.address ?? ctx.origin?.ip ?? null;
  const line = {
    audit: true,
    action: event.action,
    outcome,
    actor_id: actor?.id ?? null,
    target: event.target ?? null,
    ...(address ? { ip: address } : {}),
    ...event.details,
  };
  const row = {
    action: event.action,
    outcome,
    actor,
    address,
    target: event.target ?? null,
    details: event.details ?? {},
    requestId: ctx.origin?.requestId ?? null,
  };
  const log = (message: string) =>
    outcome === 'succeeded' ? ctx.logger.info(line, message) : ctx.logger.warn(line, message);
  return { row, log };
}

/**
 * Logs what changed nothing (a refusal) and appends it to the trail; a failure to append is logged, never thrown. A
 * change is recorded with `auditedChange`.
 */
export async function audit(ctx: AuthContext, event: AuditEvent, message: string): Promise<void> {
  const { row, log } = entryOf(ctx, event);
  log(message);
  try {
    await appendAudit(ctx.db, row);
  } catch (err) {
    ctx.logger.error({ err, action: event.action }, 'appending to the audit trail failed');
  }
}

/**
 * Appends an event to the trail in the change's transaction; its log line is written once that has committed.
 * `revocation`: the change takes access away (a sign-out, a key revoked, a stolen token's sign-in ended), and stands
 * even where its event cannot be appended: the append is undone alone (a savepoint) and the event logged as an error.
 */
export type RecordAudit = (event: AuditEvent, message: string, opts?: { revocation?: boolean }) => Promise<void>;

/**
 * Runs `change` in a transaction in which it records its events (`record`): the change and its events commit together
 * or not at all (a failed append throws, and the change is rolled back), but a revocation, which stands alone (see
 * `RecordAudit`). Each event's log line is written after the commit. Appending takes the trail's one lock until the
 * commit: record last, after the change's own work.
 */
export async function auditedChange<T>(
  ctx: AuthContext,
  change: (trx: Transaction<AuthDatabase>, record: RecordAudit) => Promise<T>,
): Promise<T> {
  const logs: (() => void)[] = [];
  const result = await ctx.db.transaction().execute((trx) =>
    change(trx, async (event, message, opts = {}) => {
      const { row, log } = entryOf(ctx, event);
      // Written only once the transaction commits (a failed append of a change throws, and nothing is logged).
      logs.push(() => log(message));
      if (!opts.revocation) {
        await appendAudit<AuthDatabase>(trx, row);
        return;
      }
      await sql`SAVEPOINT audit_event`.execute(trx);
      try {
        await appendAudit<AuthDatabase>(trx, row);
        await sql`RELEASE SAVEPOINT audit_event`.execute(trx);
      } catch (err) {
        await sql`ROLLBACK TO SAVEPOINT audit_event`.execute(trx);
        logs.push(() =>
          ctx.logger.error({ err, action: event.action }, 'appending to the audit trail failed: the revocation stands'),
        );
      }
    }),
  );
  for (const log of logs) log();
  return result;
}
