/**
 * Billing XLIV: the audit trail's `requested` outcome. A money route's event is written ahead of its handler
 * (@gpu/common's http/audit-hook.ts) and an automatic payout's in the debit's own transaction: a crash between the
 * money moving and its outcome's event leaves that event without a later one naming it, where before nothing was left.
 *
 * `down` puts the three outcomes back for new events only (NOT VALID): the `requested` events already there stay, as
 * nothing may delete them.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const auditRequestedMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      ALTER TABLE audit_events DROP CONSTRAINT audit_events_outcome,
        ADD CONSTRAINT audit_events_outcome CHECK (outcome IN ('requested', 'succeeded', 'refused', 'failed'))
    `.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`
      ALTER TABLE audit_events DROP CONSTRAINT audit_events_outcome,
        ADD CONSTRAINT audit_events_outcome CHECK (outcome IN ('succeeded', 'refused', 'failed')) NOT VALID
    `.execute(db);
  },
};
