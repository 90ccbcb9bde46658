/** /api/v1/auth/audit: the audit trail of security-relevant actions, for admins (domain/audit.ts). */
import { type App, auditTrailRoute } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { AuthContext } from '../domain/context.ts';
import { schemas } from './schemas.ts';

export async function auditRoutes(app: App, ctx: AuthContext): Promise<void> {
  auditTrailRoute(app, {
    db: ctx.db as unknown as Kysely<never>,
    url: '/audit',
    schemas,
    examples: 'roles_changed, api_key_created, api_key_revoked, api_key_refused, client_created, password_reset, ...',
  });
}
