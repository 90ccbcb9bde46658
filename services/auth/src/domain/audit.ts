/**
 * The auth service's audit trail: each security-relevant action (API keys and clients created, rotated, revoked or
 * refused; roles changed; passwords changed or reset; devices signed out; addresses verified) is logged and appended
 * to `audit_events` (append-only in the database) with who did it, from which address, in which request, and the
 * outcome. Admins read it at `GET /api/v1/auth/audit`; `audit.retention` says how long it is kept.
 */
import { type AuditOutcome, appendAudit, auditActor, type Principal } from '@gpu/common';
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

/** Logs the action and appends it to the trail; a failure to append is logged, never thrown (the action is done). */
export async function audit(ctx: AuthContext, event: AuditEvent, message: string): Promise<void> {
  const actor = actorOf(event.actor);
  const outcome = event.outcome ?? 'succeeded';
  const line = {
    audit: true,
    action: event.action,
    outcome,
    actor_id: actor?.id ?? null,
    target: event.target ?? null,
    ...event.details,
  };
  if (outcome === 'succeeded') ctx.logger.info(line, message);
  else ctx.logger.warn(line, message);
  try {
    await appendAudit(ctx.db, {
      action: event.action,
      outcome,
      actor,
      address: event.address ?? ctx.origin?.ip ?? null,
      target: event.target ?? null,
      details: event.details ?? {},
      requestId: ctx.origin?.requestId ?? null,
    });
  } catch (err) {
    ctx.logger.error({ err, action: event.action }, 'appending to the audit trail failed');
  }
}
