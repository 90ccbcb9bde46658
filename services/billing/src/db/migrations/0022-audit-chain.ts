/**
 * Billing XXII: the audit trail chained by hash (@gpu/common's db/audit-chain.ts): every event carries its place
 * (`seq`), the previous event's hash and its own, set by a trigger as it is inserted; events already there are chained
 * in the order they were written. Nothing updates an event; the database deletes one only past the retention it holds
 * (written by the migration step from `audit.retention`), from the start of the chain; the guard that honoured a
 * setting any session could set is gone.
 *
 * Frozen: written against Kysely<any>.
 */
import { chainAuditTable, unchainAuditTable } from '@gpu/common';
import type { Kysely, Migration } from 'kysely';

export const auditChainMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await chainAuditTable(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await unchainAuditTable(db);
  },
};
