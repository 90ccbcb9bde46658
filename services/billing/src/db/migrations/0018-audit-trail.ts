/**
 * Billing XVIII: the audit trail (`audit_events`, @gpu/common's db/audit-trail.ts): every answer of a route that moves
 * money out or changes who gets it (withdrawals, payouts, payout settings, rates), with who, from where, in which
 * request, what and the outcome (`succeeded`, `refused`, `failed`), in @gpu/common's db/audit-table.ts (append-only
 * in the database: a trigger refuses every UPDATE, TRUNCATE and DELETE but the retention purge's).
 *
 * Frozen: written against Kysely<any>.
 */
import { createAuditTable, dropAuditTable } from '@gpu/common';
import type { Kysely, Migration } from 'kysely';

export const auditTrailMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await createAuditTable(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await dropAuditTable(db);
  },
};
