/**
 * The transactional outbox of status events (the platform's one event
 * pattern, `Outbox` in `@gpu/common`): every status change writes its event
 * here in the statement or transaction of the change, and a relay publishes
 * the rows on NATS afterwards, so an event goes out exactly when its change
 * committed and survives a crash in between. The partial index serves the
 * relay's "oldest unpublished first". Frozen: Kysely<any>; the table is
 * common's `createOutboxTable`, the same DDL billing's ledger migration runs.
 */
import { createOutboxTable, dropOutboxTable } from '@gpu/common';
import type { Kysely } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await createOutboxTable(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await dropOutboxTable(db);
}
