/**
 * The discovery query. Provider-level conditions (effective status, health,
 * the GPU summary columns) filter the provider row while an index walks it
 * in sort order; a per-provider count over `gpus` confirms conditions that
 * must hold for the same GPUs. A page is `limit + 1` rows, the extra one only
 * telling whether another page exists.
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import { type Cursor, type DiscoveryFilter, parseSort, type SortKey } from '../domain/discovery.ts';
import type { Provider } from '../domain/provider.ts';
import type { ProviderListRow } from './provider-mapper.ts';
import { withGpus } from './provider-repository.ts';
import type { RegistryDB } from './schema.ts';
import { effectiveStatusIs, effectiveStatusSql } from './sql-rules.ts';

const SORT_COLUMNS: Record<SortKey, RawBuilder<unknown>> = {
  registered_at: sql`p.registered_at`,
  last_seen_at: sql`p.last_seen_at`,
  vram: sql`p.max_vram`,
  gpu_count: sql`p.gpu_count`,
};

/** Exact text of a sort value, so a cursor resumes after the row and not a rounded copy of it. */
function sortValueText(key: SortKey): RawBuilder<string> {
  const column = SORT_COLUMNS[key];
  return key === 'vram' || key === 'gpu_count'
    ? sql<string>`${column}::text`
    : sql<string>`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

function cursorValue(key: SortKey, cursor: Cursor): RawBuilder<unknown> {
  return key === 'vram' || key === 'gpu_count' ? sql`${cursor.value}::bigint` : sql`${cursor.value}::timestamptz`;
}

/** `%term%` for LIKE, with the term's own wildcards escaped. */
const containsPattern = (term: string) => `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

function conditions(filter: DiscoveryFilter, offlineAfterMs: number): RawBuilder<boolean>[] {
  const where: RawBuilder<boolean>[] = [];
  if (filter.owner_id !== undefined) where.push(sql`p.owner_id = ${filter.owner_id}`);
  if (filter.status) where.push(effectiveStatusIs(filter.status, offlineAfterMs));
  if (filter.healthy_only) where.push(sql`p.all_healthy`);

  const gpuConditions: RawBuilder<boolean>[] = [];
  const model = filter.gpu_model?.toLowerCase();
  const arch = filter.architecture?.toLowerCase();
  if (model !== undefined) {
    where.push(sql`p.gpu_models LIKE ${containsPattern(model)}`);
    gpuConditions.push(sql`lower(g.model_name) LIKE ${containsPattern(model)}`);
  }
  if (filter.min_vram !== undefined) {
    where.push(sql`p.max_vram >= ${filter.min_vram}`);
    gpuConditions.push(sql`g.vram >= ${filter.min_vram}`);
  }
  if (arch !== undefined) {
    where.push(sql`p.gpu_architectures LIKE ${containsPattern(`|${arch}|`)}`);
    gpuConditions.push(sql`lower(g.architecture) = ${arch}`);
  }
  const minGpus = filter.min_gpus ?? 1;
  if (minGpus > 1) where.push(sql`p.gpu_count >= ${minGpus}`);
  // The summary columns decide alone when one GPU condition must hold for one GPU
  // (a model term with `|` could match across names, so it is always confirmed).
  const summaryIsExact = gpuConditions.length === 1 && minGpus <= 1 && !model?.includes('|');
  if (gpuConditions.length > 0 && !summaryIsExact) {
    where.push(
      sql`(SELECT count(*) FROM gpus g WHERE g.provider_id = p.id AND ${sql.join(gpuConditions, sql` AND `)}) >= ${minGpus}`,
    );
  }
  return where;
}

export interface DiscoveryPage {
  providers: Provider[];
  /** Where the next page starts; undefined on the last page. */
  next?: Cursor;
}

export async function listProviders(
  db: Kysely<RegistryDB>,
  filter: DiscoveryFilter,
  offlineAfterMs: number,
): Promise<DiscoveryPage> {
  const { key, descending } = parseSort(filter.sort);
  const column = SORT_COLUMNS[key];
  const where = conditions(filter, offlineAfterMs);
  if (filter.cursor) {
    const after = cursorValue(key, filter.cursor);
    where.push(
      descending
        ? sql`(${column}, p.id) < (${after}, ${filter.cursor.id}::uuid)`
        : sql`(${column}, p.id) > (${after}, ${filter.cursor.id}::uuid)`,
    );
  }
  const direction = descending ? sql`DESC` : sql`ASC`;
  const { rows } = await sql<ProviderListRow & { sort_value: string }>`
    SELECT p.id, p.owner_id, p.name, p.hostname, p.ip_address, p.location, p.metadata,
           p.registered_at, p.last_seen_at, ${effectiveStatusSql(offlineAfterMs)} AS status,
           ${sortValueText(key)} AS sort_value
    FROM providers p
    ${where.length > 0 ? sql`WHERE ${sql.join(where, sql` AND `)}` : sql``}
    ORDER BY ${column} ${direction}, p.id ${direction}
    LIMIT ${filter.limit + 1}`.execute(db);
  const page = rows.slice(0, filter.limit);
  const last = page.at(-1);
  const providers = await withGpus(db, page);
  return {
    providers,
    next: rows.length > filter.limit && last ? { sort: filter.sort, value: last.sort_value, id: last.id } : undefined,
  };
}
