/** Every migration of the storage service, by name (applied in name order). */
import type { Migration } from 'kysely';
import * as objectCatalog from './20250101000000_object_catalog.ts';
import * as reconcileSweep from './20250201000000_reconcile_sweep.ts';
import * as expectedWriteNotes from './20251201000000_expected_write_notes.ts';
import * as writeUrlNotes from './20261201000000_write_url_notes.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_object_catalog': objectCatalog,
  '20250201000000_reconcile_sweep': reconcileSweep,
  '20251201000000_expected_write_notes': expectedWriteNotes,
  '20261201000000_write_url_notes': writeUrlNotes,
};
