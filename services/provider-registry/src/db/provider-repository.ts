/**
 * Provider CRUD. Registration and full update each run in one transaction
 * (provider row, its GPU summary, its GPU rows and its `provider_models`
 * keys); GPUs and keys go with their provider through ON DELETE CASCADE.
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import type { MachineBinding, WriteScope } from '../domain/access.ts';
import { foldSql } from '../domain/case-fold.ts';
import { GPU_FIELDS } from '../domain/gpu-fields.ts';
import { offerGroups } from '../domain/offers.ts';
import {
  holdAfterExplicit,
  MIN_GPUS_PER_RENTAL,
  type Provider,
  type ProviderInput,
  type ProviderStatus,
  summarizeGpus,
} from '../domain/provider.ts';
import type { EventRecording } from '../domain/status-events.ts';
import { registryErrors } from '../errors.ts';
import { writeOffers } from './offer-repository.ts';
import { type ProviderListRow, toGpuRows, toProvider } from './provider-mapper.ts';
import type { GpuRow, RegistryDB } from './schema.ts';
import { effectiveStatusSql } from './sql-rules.ts';
import { withStatusEvents } from './status-event-sql.ts';
import { applyRentalRule, inScope, isFullyRented } from './status-repository.ts';

type Db = Kysely<RegistryDB> | Transaction<RegistryDB>;

const UNIQUE_VIOLATION = '23505';

function rethrowDuplicate(err: unknown, input: ProviderInput): never {
  const e = err as { code?: string; constraint?: string; message?: string };
  if (e.code === UNIQUE_VIOLATION && (e.constraint ?? e.message ?? '').includes('providers_owner_name_key')) {
    throw registryErrors.providerAlreadyExists(input.owner_id, input.name);
  }
  throw err;
}

/** The provider's columns with its clock (its narrow row's) and the effective status. */
function selectProviders(db: Db, offlineAfterMs: number) {
  return db
    .selectFrom('providers as p')
    .innerJoin('provider_liveness as l', 'l.provider_id', 'p.id')
    .select([
      'p.id',
      'p.owner_id',
      'p.daemon_client_id',
      'p.name',
      'p.hostname',
      'p.ip_address',
      'p.min_gpus_per_rental',
      'p.held',
      'p.location',
      'p.disk_mb',
      'p.metadata',
      'p.registered_at',
      'l.last_seen_at',
      effectiveStatusSql(offlineAfterMs, { status: 'p.status', lastSeenAt: 'l.last_seen_at' }).as('status'),
    ]);
}

/** The columns of a GpuRow: the provider, the index and every GPU field (not the rendered `spec_json`). */
const GPU_COLUMNS = [
  'provider_id',
  'idx',
  ...GPU_FIELDS.map((f) => f.name),
] as const satisfies readonly (keyof GpuRow)[];

/** GPU rows of the given providers, grouped by provider ID. */
async function loadGpus(db: Db, providerIds: string[]): Promise<Map<string, GpuRow[]>> {
  const byProvider = new Map<string, GpuRow[]>(providerIds.map((id) => [id, []]));
  if (providerIds.length === 0) return byProvider;
  const rows = await db
    .selectFrom('gpus')
    .select(GPU_COLUMNS)
    .where('provider_id', 'in', providerIds)
    .orderBy('provider_id')
    .orderBy('idx')
    .execute();
  for (const row of rows) byProvider.get(row.provider_id)?.push(row);
  return byProvider;
}

/** Provider rows (as listed) to API objects with their GPUs. */
async function withGpus(db: Db, rows: ProviderListRow[]): Promise<Provider[]> {
  const gpus = await loadGpus(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((r) => toProvider(r, gpus.get(r.id) ?? []));
}

export async function findProvider(db: Db, id: string, offlineAfterMs: number): Promise<Provider | undefined> {
  const row = await selectProviders(db, offlineAfterMs).where('p.id', '=', id).executeTakeFirst();
  if (!row) return undefined;
  const [provider] = await withGpus(db, [row as ProviderListRow]);
  return provider;
}

/**
 * Writes the provider's discovery keys (one per distinct GPU model, with its
 * sort keys) from the GPU rows and summary just written in `tx`.
 */
async function insertModelKeys(tx: Transaction<RegistryDB>, id: string): Promise<void> {
  await sql`
    INSERT INTO provider_models (provider_id, model, registered_at, max_vram, gpu_count)
    SELECT DISTINCT p.id, ${sql.raw(foldSql('g.model_name'))}, p.registered_at, p.max_vram, p.gpu_count
    FROM providers p JOIN gpus g ON g.provider_id = p.id
    WHERE p.id = ${id}`.execute(tx);
}

/**
 * The provider row's writable fields from an input (with its GPU summary); `minGpus` and `disk` when the input has
 * none, `held` when its status neither holds nor releases the machine (`holdAfterExplicit`).
 */
function writableFields(
  input: ProviderInput,
  status: ProviderStatus,
  minGpus: number = MIN_GPUS_PER_RENTAL.default,
  held = false,
  disk: number | null = null,
) {
  return {
    owner_id: input.owner_id,
    name: input.name,
    hostname: input.hostname ?? null,
    ip_address: input.ip_address ?? null,
    status,
    held: holdAfterExplicit(input.status) ?? held,
    location: input.location ?? null,
    metadata: JSON.stringify(input.metadata ?? {}),
    min_gpus_per_rental: input.min_gpus_per_rental ?? minGpus,
    disk_mb: input.disk_mb === undefined ? disk : input.disk_mb,
    ...summarizeGpus(input.gpus),
  };
}

/**
 * Writes a provider's GPU rows, its discovery keys (after any old ones were deleted in `tx`) and its offers (one per
 * GPU model: the market).
 */
async function writeGpus(
  tx: Transaction<RegistryDB>,
  id: string,
  input: ProviderInput,
  status: ProviderStatus,
  disk: number | null,
): Promise<void> {
  if (input.gpus.length > 0) await tx.insertInto('gpus').values(toGpuRows(id, input.gpus)).execute();
  await insertModelKeys(tx, id);
  await writeOffers(tx, id, offerGroups(input.gpus), status, { region: input.location ?? null, diskMb: disk });
}

/**
 * Inserts a provider and its GPUs in one transaction, bound to the daemon client `daemon` (null: none), recording the
 * registration's status event (when events are on) with the provider row; a duplicate (owner, name) is
 * `PROVIDER_ALREADY_EXISTS`.
 */
export async function insertProvider(
  db: Kysely<RegistryDB>,
  id: string,
  input: ProviderInput,
  daemon: string | null,
  recording?: EventRecording,
): Promise<void> {
  const status: ProviderStatus = input.status ?? 'idle';
  try {
    await db.transaction().execute(async (tx) => {
      const insert = tx
        .insertInto('providers')
        .values({ id, ...writableFields(input, status), daemon_client_id: daemon })
        .returning(['id', 'owner_id', sql<null>`NULL::text`.as('previous_status'), 'status']);
      await withStatusEvents(insert, recording).execute(tx);
      await writeGpus(tx, id, input, status, input.disk_mb ?? null);
    });
  } catch (err) {
    rethrowDuplicate(err, input);
  }
}

/**
 * Replaces every writable field and the GPU list in one transaction.
 * `last_seen_at` (the narrow liveness row's) moves only when the status changes (an explicit status
 * update), and so does a status event get recorded. Returns the previous
 * stored status and the one it has now, or undefined when the provider does
 * not exist. With a status, `guard` is called under the row lock, once the
 * new GPUs and minimum are written, with whether the provider is fully rented
 * (the rental rule's condition); what it throws rolls the update back.
 * Without one, the rental rule is applied to the new GPUs and minimum (a
 * machine can become fully rented, or rentable again).
 */
export async function replaceProvider(
  db: Kysely<RegistryDB>,
  id: string,
  input: ProviderInput,
  recording?: EventRecording,
  guard?: (fullyRented: boolean) => void,
  /** Throws when the machine as locked (its owner, its daemon) may not be written by the caller. */
  allowed?: (machine: { owner_id: string; daemon_client_id: string | null }) => void,
): Promise<{ previous: ProviderStatus; status: ProviderStatus; owner_id: string } | undefined> {
  try {
    return await db.transaction().execute(async (tx) => {
      const current = await tx
        .selectFrom('providers')
        .select(['status', 'owner_id', 'daemon_client_id', 'min_gpus_per_rental', 'held', 'disk_mb'])
        .where('id', '=', id)
        .forUpdate()
        .executeTakeFirst();
      if (!current) return undefined;
      // Checked again as locked: a transfer to another owner, or a daemon unbound, committed since the caller's
      // check is not written over.
      allowed?.(current);
      // The narrow row before the GPUs, the order every writer of both keeps (a heartbeat moves the clock, then
      // writes the GPUs' metrics): the other order could deadlock with it.
      await lockLiveness(tx, id);
      // Billing holds GPUs by their place in the list: it may not shift under them.
      const holding = await tx
        .selectFrom('gpu_holds')
        .select('provider_id')
        .where('provider_id', '=', id)
        .where(sql<boolean>`cardinality(gpu_indices) > 0`)
        .executeTakeFirst();
      if (holding) {
        const before = await tx
          .selectFrom('gpus')
          .select('model_name')
          .where('provider_id', '=', id)
          .orderBy('idx')
          .execute();
        const shifted =
          before.length !== input.gpus.length || before.some((g, i) => g.model_name !== input.gpus[i]!.model_name);
        if (shifted) throw registryErrors.gpusRented(id);
      }
      const previous = current.status as ProviderStatus;
      const status = input.status ?? previous;
      const changed = status !== previous;
      const update = tx
        .updateTable('providers')
        .set(writableFields(input, status, current.min_gpus_per_rental, current.held, current.disk_mb))
        .where('id', '=', id)
        .returning(['id', 'owner_id', sql<string>`${previous}::text`.as('previous_status'), 'status']);
      await withStatusEvents(update, changed ? recording : undefined).execute(tx);
      // After the status (whose uptime trigger reads the clock as it was); the copy of the status came with it.
      if (changed) {
        await tx
          .updateTable('provider_liveness')
          .set({ last_seen_at: sql<Date>`now()` })
          .where('provider_id', '=', id)
          .execute();
      }
      await tx.deleteFrom('gpus').where('provider_id', '=', id).execute();
      await tx.deleteFrom('provider_models').where('provider_id', '=', id).execute();
      await writeGpus(tx, id, input, status, input.disk_mb === undefined ? current.disk_mb : input.disk_mb);
      if (input.status !== undefined) {
        guard?.(await isFullyRented(tx, id));
        return { previous, status, owner_id: current.owner_id };
      }
      const rented = await applyRentalRule(tx, id, recording);
      return { previous, status: rented?.status ?? status, owner_id: current.owner_id };
    });
  } catch (err) {
    rethrowDuplicate(err, input);
  }
}

/**
 * Deletes a provider (its GPUs, discovery keys and rental sessions follow by cascade) and records its removal event
 * in the same statement (`recording` of reason `removed`; none when events are off); false when it did not exist
 * (or, with `scope`, is not in it).
 */
export async function deleteProvider(
  db: Kysely<RegistryDB>,
  id: string,
  scope?: WriteScope,
  recording?: EventRecording,
): Promise<boolean> {
  const limit = inScope(scope, 'p');
  return db.transaction().execute(async (tx) => {
    // The provider row, then the narrow row, then (by the cascade) the GPUs: the order every writer of them keeps.
    const { rows: found } = await sql`SELECT 1 FROM providers p WHERE p.id = ${id}${limit} FOR UPDATE`.execute(tx);
    if (found.length === 0) return false;
    await lockLiveness(tx, id);
    const { rows } = await withStatusEvents<{ id: string }>(
      sql`
      DELETE FROM providers p WHERE p.id = ${id}${limit}
      RETURNING p.id, p.owner_id, p.status AS previous_status, NULL::text AS status`,
      recording,
    ).execute(tx);
    return rows.length > 0;
  });
}

/** Locks a provider's narrow row (`provider_liveness`); call it under the provider row's lock. */
async function lockLiveness(tx: Kysely<RegistryDB>, id: string): Promise<void> {
  await sql`SELECT 1 FROM provider_liveness WHERE provider_id = ${id} FOR UPDATE`.execute(tx);
}

/** The owner of a provider and the daemon it is bound to, for authorization; undefined when it does not exist. */
export async function providerBinding(db: Kysely<RegistryDB>, id: string): Promise<MachineBinding | undefined> {
  return db.selectFrom('providers').select(['owner_id', 'daemon_client_id']).where('id', '=', id).executeTakeFirst();
}

/**
 * Binds the provider to the daemon client `daemon` (null: none), within `scope` (undefined: any machine; for a daemon
 * one bound to it or to none, so that of two daemons claiming a machine at once one wins), recording `event` in the
 * outbox when the binding changes. What it was bound to before, or undefined when nothing was found in scope.
 */
export async function bindProvider(
  db: Kysely<RegistryDB>,
  id: string,
  daemon: string | null,
  scope: WriteScope | undefined,
  record: (tx: Transaction<RegistryDB>, binding: MachineBinding) => Promise<void>,
): Promise<{ previous: string | null } | undefined> {
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<MachineBinding>`
      SELECT p.owner_id, p.daemon_client_id FROM providers p WHERE p.id = ${id}${inScope(scope, 'p')}
      FOR UPDATE`.execute(tx);
    const found = rows[0];
    if (!found) return undefined;
    if (found.daemon_client_id !== daemon) {
      await tx.updateTable('providers').set({ daemon_client_id: daemon }).where('id', '=', id).execute();
      await record(tx, { owner_id: found.owner_id, daemon_client_id: daemon });
    }
    return { previous: found.daemon_client_id };
  });
}
