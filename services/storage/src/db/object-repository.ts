/**
 * The object catalog's queries (`domain/catalog/catalog.ts` is the port they implement), on PostgreSQL or PGlite.
 * Keys compare and sort by their UTF-8 bytes: the columns are `COLLATE "C"`, so every range below walks the primary
 * key `(bucket, key)` in order and a page stops after its rows.
 */
import { lockName } from '@gpu/common';
import { type Kysely, sql } from 'kysely';
import type {
  CatalogObject,
  CatalogPageRequest,
  ExpectedWrite,
  ObjectCatalog,
  SweepPosition,
  WriteUrlOwner,
} from '../domain/catalog/catalog.ts';
import type { ObjectEntry } from '../domain/store.ts';
import type { StorageDB } from './schema.ts';

/** Rows per INSERT: well under PostgreSQL's 65,535 parameters (7 a row). */
const INSERT_BATCH = 1000;

/** How many periods' claims are kept (the rest are deleted as a period is claimed). */
const CLAIMS_KEPT = 10;

const toRow = (o: CatalogObject) => ({
  bucket: o.bucket,
  key: o.key,
  size: o.size,
  content_type: o.contentType ?? null,
  etag: o.etag ?? null,
  owner_id: o.ownerId ?? null,
  last_modified: o.lastModified ?? null,
});

export class ObjectRepository implements ObjectCatalog {
  constructor(private readonly db: Kysely<StorageDB>) {}

  async now(): Promise<Date> {
    const { rows } = await sql<{ now: Date }>`SELECT now() AS now`.execute(this.db);
    return new Date(rows[0]!.now);
  }

  async put(objects: CatalogObject[], opts: { staleBefore?: Date; latest?: boolean } = {}): Promise<void> {
    for (let i = 0; i < objects.length; i += INSERT_BATCH) {
      await this.db
        .insertInto('objects')
        .values(objects.slice(i, i + INSERT_BATCH).map(toRow))
        .onConflict((oc) => {
          const update = oc.columns(['bucket', 'key']).doUpdateSet((eb) => ({
            size: eb.ref('excluded.size'),
            content_type: eb.ref('excluded.content_type'),
            etag: eb.ref('excluded.etag'),
            owner_id: eb.ref('excluded.owner_id'),
            last_modified: eb.ref('excluded.last_modified'),
            updated_at: sql`now()`,
          }));
          if (opts.latest) return update;
          return opts.staleBefore
            ? update.where('objects.updated_at', '<', opts.staleBefore)
            : update.where(
                sql<boolean>`objects.last_modified IS NULL OR excluded.last_modified IS NULL OR objects.last_modified <= excluded.last_modified`,
              );
        })
        .execute();
    }
  }

  withKey<T>(bucket: string, key: string, fn: (catalog: ObjectRepository) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(async (trx) => {
      await lockName(trx, `catalog:${bucket}/${key}`);
      return fn(new ObjectRepository(trx));
    });
  }

  async remove(bucket: string, key: string): Promise<void> {
    await this.db.deleteFrom('objects').where('bucket', '=', bucket).where('key', '=', key).execute();
  }

  async removeOthers(
    bucket: string,
    range: { after?: string; upTo?: string },
    keep: string[],
    staleBefore: Date,
  ): Promise<void> {
    let q = this.db.deleteFrom('objects').where('bucket', '=', bucket).where('updated_at', '<', staleBefore);
    if (range.after !== undefined) q = q.where('key', '>', range.after);
    if (range.upTo !== undefined) q = q.where('key', '<=', range.upTo);
    if (keep.length > 0) q = q.where(sql<boolean>`key <> ALL(${keep}::text[])`);
    await q.execute();
  }

  async removeBucket(bucket: string): Promise<void> {
    await this.db.deleteFrom('objects').where('bucket', '=', bucket).execute();
    await this.db.deleteFrom('catalog_buckets').where('name', '=', bucket).execute();
  }

  async lookup(bucket: string, keys: string[]): Promise<Map<string, { etag?: string; size: number }>> {
    const found = new Map<string, { etag?: string; size: number }>();
    if (keys.length === 0) return found;
    const rows = await this.db
      .selectFrom('objects')
      .select(['key', 'etag', 'size'])
      .where('bucket', '=', bucket)
      .where(sql<boolean>`key = ANY(${keys}::text[])`)
      .execute();
    for (const r of rows) found.set(r.key, { etag: r.etag ?? undefined, size: Number(r.size) });
    return found;
  }

  async page(req: CatalogPageRequest): Promise<ObjectEntry[]> {
    let q = this.db
      .selectFrom('objects')
      .select(['key', 'size', 'content_type', 'etag', 'last_modified'])
      .where('bucket', '=', req.bucket);
    // starts_with on a "C" column is a range of the primary key (the planner bounds the walk by the prefix).
    if (req.prefix) q = q.where(sql<boolean>`starts_with(key, ${req.prefix})`);
    if (req.after !== undefined) q = q.where('key', req.inclusive ? '>=' : '>', req.after);
    const rows = await q.orderBy('key').limit(req.limit).execute();
    return rows.map((r) => ({
      key: r.key,
      size: Number(r.size),
      contentType: r.content_type ?? undefined,
      etag: r.etag ?? undefined,
      lastModified: r.last_modified ? new Date(r.last_modified) : undefined,
      isPrefix: false,
    }));
  }

  async setOwner(bucket: string, ownerId: string | undefined): Promise<void> {
    await this.db
      .updateTable('objects')
      .set({ owner_id: ownerId ?? null })
      .where('bucket', '=', bucket)
      .where(sql<boolean>`owner_id IS DISTINCT FROM ${ownerId ?? null}`)
      .execute();
  }

  async usageByOwner(): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom('objects')
      .select(['owner_id', sql<number>`sum(size)::bigint`.as('bytes')])
      .where('owner_id', 'is not', null)
      .groupBy('owner_id')
      .execute();
    return new Map(rows.map((r) => [r.owner_id!, Number(r.bytes)]));
  }

  async reconciledAt(bucket: string): Promise<Date | undefined> {
    const row = await this.db
      .selectFrom('catalog_buckets')
      .select('reconciled_at')
      .where('name', '=', bucket)
      .executeTakeFirst();
    return row?.reconciled_at ? new Date(row.reconciled_at) : undefined;
  }

  async markReconciled(bucket: string, at: Date): Promise<void> {
    await this.db
      .insertInto('catalog_buckets')
      .values({ name: bucket, reconciled_at: at })
      .onConflict((oc) => oc.column('name').doUpdateSet({ reconciled_at: at }))
      .execute();
  }

  async knownBuckets(): Promise<string[]> {
    const rows = await this.db.selectFrom('catalog_buckets').select('name').orderBy('name').execute();
    return rows.map((r) => r.name);
  }

  async claimPeriod(periodStart: Date, instanceId: string): Promise<boolean> {
    const claimed = await this.db
      .insertInto('reconcile_runs')
      .values({ period_start: periodStart, instance_id: instanceId })
      .onConflict((oc) => oc.column('period_start').doNothing())
      .returning('period_start')
      .executeTakeFirst();
    if (claimed) {
      const old = await this.db
        .selectFrom('reconcile_runs')
        .select('period_start')
        .orderBy('period_start', 'desc')
        .offset(CLAIMS_KEPT)
        .limit(1)
        .executeTakeFirst();
      if (old) await this.db.deleteFrom('reconcile_runs').where('period_start', '<=', old.period_start).execute();
    }
    return claimed !== undefined;
  }

  async sweepPosition(): Promise<SweepPosition> {
    const row = await this.db.selectFrom('catalog_sweep').select(['bucket', 'after_key']).executeTakeFirst();
    return row ? { bucket: row.bucket, ...(row.after_key !== null ? { after: row.after_key } : {}) } : { bucket: '' };
  }

  async saveSweepPosition(position: SweepPosition): Promise<void> {
    const values = { bucket: position.bucket, after_key: position.after ?? null };
    await this.db
      .insertInto('catalog_sweep')
      .values({ id: 1, ...values })
      .onConflict((oc) => oc.column('id').doUpdateSet(values))
      .execute();
  }

  async expectWrite(write: ExpectedWrite): Promise<void> {
    await this.db
      .insertInto('catalog_expected_writes')
      .values({ ...write, kind: 'copy' })
      .onConflict((oc) => oc.columns(['bucket', 'key', 'until', 'kind']).doNothing())
      .execute();
  }

  async noteWriteUrl(write: ExpectedWrite, owner?: WriteUrlOwner): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      if (owner) {
        // The owner's URLs take turns: two handed out at once never pass the bound together.
        await lockName(trx, `write-urls:${owner.id}`);
        const open = await trx
          .selectFrom('catalog_expected_writes')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('kind', '=', 'url')
          .where('owner', '=', owner.id)
          .where('until', '>', sql<Date>`now()`)
          // The key itself, noted already, is no other key: a URL of it again moves its note on.
          .where((eb) => eb.not(eb.and([eb('bucket', '=', write.bucket), eb('key', '=', write.key)])))
          .executeTakeFirst();
        if (Number(open?.n ?? 0) >= owner.max) return false;
      }
      await trx
        .insertInto('catalog_expected_writes')
        .values({ ...write, kind: 'url', owner: owner?.id ?? null })
        .onConflict((oc) =>
          oc.columns(['bucket', 'key']).where('kind', '=', 'url').doUpdateSet({
            until: sql<Date>`GREATEST(catalog_expected_writes.until, excluded.until)`,
            owner: sql<string | null>`COALESCE(excluded.owner, catalog_expected_writes.owner)`,
          }),
        )
        .execute();
      return true;
    });
  }

  async expectedWrites(): Promise<ExpectedWrite[]> {
    const rows = await this.db
      .selectFrom('catalog_expected_writes')
      .select(['bucket', 'key', (eb) => eb.fn.max('until').as('until')])
      .groupBy(['bucket', 'key'])
      .orderBy('bucket')
      .orderBy('key')
      .execute();
    return rows.map((r) => ({ bucket: r.bucket, key: r.key, until: new Date(r.until) }));
  }

  async forgetExpectedWrites(before: Date): Promise<void> {
    await this.db.deleteFrom('catalog_expected_writes').where('until', '<', before).execute();
  }

  async forgetExpectedWrite(write: ExpectedWrite): Promise<void> {
    await this.db
      .deleteFrom('catalog_expected_writes')
      .where('bucket', '=', write.bucket)
      .where('key', '=', write.key)
      .where('until', '=', write.until)
      .where('kind', '=', 'copy')
      .execute();
  }
}
