/**
 * The discovery query. One statement chooses the page (provider IDs in sort
 * order, `limit + 1` of them, the extra one only telling whether another page
 * exists) and renders it as the API's JSON (`provider-json-sql.ts`).
 *
 * The page is chosen by walking an index in sort order and stopping early:
 * - **by provider**: a provider index; provider-level conditions (effective
 *   status, health, the GPU summary columns) filter each row, and a count over
 *   `gpus` confirms conditions that must hold for the same GPUs;
 * - **by clock**, for the `last_seen_at` sorts: the clock lives in the narrow
 *   `provider_liveness` row (heartbeats write nothing else), in no index (so
 *   that a heartbeat is a heap-only write): the narrow rows of the asked
 *   status and model are read and sorted, and the provider conditions apply
 *   to each in that order until a page is full; without provider conditions
 *   only the page is kept (a top-N sort). Exact, at the cost of reading every
 *   narrow row of the asked status (at 1,000,000 providers, about 150 ms);
 * - **by model**, for a `gpu_model` term with a sort key that never changes
 *   after registration (everything but `last_seen_at`): the page merges the
 *   matching models' ranges of `provider_models`, each already in sort order,
 *   so only providers with a matching GPU are visited, wherever the sort puts
 *   them. The same provider conditions then apply to each. The model names
 *   come from a short statement before the page the first time a term is
 *   asked, and after that from what the term matched last (`ModelNames`),
 *   checked by the page's own statement (one round trip instead of two).
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import { foldCase, foldSql } from '../domain/case-fold.ts';
import { type Cursor, type DiscoveryFilter, parseSort, type SortKey } from '../domain/discovery.ts';
import { providerJsonSql } from './provider-json-sql.ts';
import type { RegistryDB } from './schema.ts';
import { effectiveStatusIs, type LivenessRefs } from './sql-rules.ts';

/** The sort column; `providers`, `provider_models` and (for `last_seen_at`) `provider_liveness` name it alike. */
const SORT_COLUMNS: Record<SortKey, string> = {
  registered_at: 'registered_at',
  last_seen_at: 'last_seen_at',
  vram: 'max_vram',
  gpu_count: 'gpu_count',
};

/**
 * Above this many matching models the model walk merges too many ranges to
 * pay off: a term that broad matches most providers, which the provider walk
 * finds quickly anyway.
 */
const MAX_MODEL_RANGES = 32;

interface Order {
  key: SortKey;
  column: string;
  direction: RawBuilder<unknown>;
  /** `<` or `>`: how a row after the cursor compares with it. */
  after: RawBuilder<unknown>;
}

function orderOf(filter: DiscoveryFilter): Order {
  const { key, descending } = parseSort(filter.sort);
  return {
    key,
    column: SORT_COLUMNS[key],
    direction: descending ? sql`DESC` : sql`ASC`,
    after: descending ? sql`<` : sql`>`,
  };
}

const isNumeric = (key: SortKey) => key === 'vram' || key === 'gpu_count';

/** Exact text of a sort value, so a cursor resumes after the row and not a rounded copy of it. */
function sortValueText(key: SortKey, value: RawBuilder<unknown>): RawBuilder<string> {
  return isNumeric(key)
    ? sql<string>`${value}::text`
    : sql<string>`to_char(${value} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** `(sort value, id)` strictly after the cursor, in sort direction (an index condition). */
function afterCursor(order: Order, sortRef: string, idRef: string, cursor: Cursor): RawBuilder<boolean> {
  const value = isNumeric(order.key) ? sql`${cursor.value}::bigint` : sql`${cursor.value}::timestamptz`;
  return sql<boolean>`(${sql.ref(sortRef)}, ${sql.ref(idRef)}) ${order.after} (${value}, ${cursor.id}::uuid)`;
}

const whereAll = (where: RawBuilder<boolean>[]) =>
  where.length > 0 ? sql`WHERE ${sql.join(where, sql` AND `)}` : sql``;

/** `%term%` for LIKE, with the term's own wildcards escaped. */
const containsPattern = (term: string) => `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * The clock of the provider row `p`: its narrow row `l`, probed by key for each provider the walk visits. The fence
 * (OFFSET 0) keeps it a probe: joined plainly, PostgreSQL may hash a whole table and sort, instead of walking an index
 * in sort order and stopping after a page.
 */
const CLOCK = sql`CROSS JOIN LATERAL (
      SELECT l.last_seen_at FROM provider_liveness l WHERE l.provider_id = p.id OFFSET 0) l`;

/** The stored status from the provider row `p` (its index walks), the clock from its narrow row `l`. */
const PROVIDER_WALK: LivenessRefs = { status: 'p.status', lastSeenAt: 'l.last_seen_at' };
/** Both from the narrow row `l` (the clock walk). */
const NARROW: LivenessRefs = { status: 'l.status', lastSeenAt: 'l.last_seen_at' };

/**
 * Conditions on the provider row `p` (and its narrow row `l`). `byModel`: the rows come from matching
 * `provider_models` keys, which already decide the model term on its own. `byClock`: the rows come from the
 * narrow rows' ranges, which already decide the status.
 */
function conditions(
  filter: DiscoveryFilter,
  offlineAfterMs: number,
  walk: 'provider' | 'model' | 'clock' = 'provider',
): RawBuilder<boolean>[] {
  const byModel = walk === 'model';
  const where: RawBuilder<boolean>[] = [];
  if (filter.owner_id !== undefined) where.push(sql`p.owner_id = ${filter.owner_id}`);
  if (filter.status && walk !== 'clock') where.push(effectiveStatusIs(filter.status, offlineAfterMs, PROVIDER_WALK));
  if (filter.healthy_only) where.push(sql`p.all_healthy`);

  const gpuConditions: RawBuilder<boolean>[] = [];
  const model = filter.gpu_model === undefined ? undefined : foldCase(filter.gpu_model);
  const arch = filter.architecture === undefined ? undefined : foldCase(filter.architecture);
  if (model !== undefined) {
    // Redundant after the model walk, and PostgreSQL would count its selectivity twice (underestimating
    // the rows a page takes, which drives the plan cost up towards JIT compilation).
    if (!byModel) where.push(sql`p.gpu_models LIKE ${containsPattern(model)}`);
    gpuConditions.push(sql`${sql.raw(foldSql('g.model_name'))} LIKE ${containsPattern(model)}`);
  }
  if (filter.min_vram !== undefined) {
    where.push(sql`p.max_vram >= ${filter.min_vram}`);
    gpuConditions.push(sql`g.vram >= ${filter.min_vram}`);
  }
  if (arch !== undefined) {
    where.push(sql`p.gpu_architectures LIKE ${containsPattern(`|${arch}|`)}`);
    gpuConditions.push(sql`${sql.raw(foldSql('g.architecture'))} = ${arch}`);
  }
  const minGpus = filter.min_gpus ?? 1;
  if (minGpus > 1) where.push(sql`p.gpu_count >= ${minGpus}`);
  // The summary columns (or the model keys) decide alone when one GPU condition must hold for one GPU
  // (in the summary, a model term with `|` could match across names, so it is always confirmed).
  const summaryIsExact = gpuConditions.length === 1 && minGpus <= 1 && (byModel || !model?.includes('|'));
  if (gpuConditions.length > 0 && !summaryIsExact) {
    where.push(
      sql`(SELECT count(*) FROM gpus g WHERE g.provider_id = p.id AND ${sql.join(gpuConditions, sql` AND `)}) >= ${minGpus}`,
    );
  }
  return where;
}

/** The page's provider rows with their `sort_key`, walking a provider index in sort order. */
function providerWalk(filter: DiscoveryFilter, offlineAfterMs: number, order: Order): RawBuilder<unknown> {
  const where = conditions(filter, offlineAfterMs);
  if (filter.cursor) where.push(afterCursor(order, `p.${order.column}`, 'p.id', filter.cursor));
  const sortKey = sql.ref(`p.${order.column}`);
  return sql`
    SELECT p.*, l.last_seen_at, ${sortKey} AS sort_key
    FROM providers p ${CLOCK}
    ${whereAll(where)}
    ORDER BY ${sortKey} ${order.direction}, p.id ${order.direction}
    LIMIT ${filter.limit + 1}`;
}

/**
 * The page's provider rows with their `sort_key`, merging the matching models' ranges of
 * `provider_models` in sort order. A provider with two matching models comes
 * twice with the same (sort key, id), next to each other; DISTINCT ON keeps one.
 * Each range states its order so PostgreSQL merges index-ordered ranges
 * (Merge Append) rather than sorting them whole.
 */
function modelWalk(filter: DiscoveryFilter, offlineAfterMs: number, order: Order, models: string[]) {
  const ranges = models.map((model) => {
    const where = [sql<boolean>`pm.model = ${model}`];
    if (filter.cursor) where.push(afterCursor(order, `pm.${order.column}`, 'pm.provider_id', filter.cursor));
    const sortKey = sql.ref(`pm.${order.column}`);
    return sql`(SELECT pm.provider_id, ${sortKey} AS sort_key FROM provider_models pm ${whereAll(where)}
      ORDER BY ${sortKey} ${order.direction}, pm.provider_id ${order.direction})`;
  });
  return sql`
    SELECT DISTINCT ON (c.sort_key, c.provider_id) p.*, l.last_seen_at, c.sort_key
    FROM (${sql.join(ranges, sql` UNION ALL `)}) c JOIN providers p ON p.id = c.provider_id ${CLOCK}
    ${whereAll(conditions(filter, offlineAfterMs, 'model'))}
    ORDER BY c.sort_key ${order.direction}, c.provider_id ${order.direction}
    LIMIT ${filter.limit + 1}`;
}

/**
 * The page's provider rows with their `sort_key` (`last_seen_at`): the narrow rows of the effective status and model
 * asked for, in clock order, each provider row then probed by key for the other conditions until the page is full.
 * Without such conditions the narrow rows' sort keeps only the page (a top-N sort), else it sorts them all.
 */
function clockWalk(filter: DiscoveryFilter, offlineAfterMs: number, order: Order) {
  const model = filter.gpu_model === undefined ? undefined : foldCase(filter.gpu_model);
  const where: RawBuilder<boolean>[] = [];
  if (filter.status) where.push(effectiveStatusIs(filter.status, offlineAfterMs, NARROW));
  // The model summary's copy passes over the other providers' rows without probing them.
  if (model !== undefined) where.push(sql<boolean>`l.gpu_models LIKE ${containsPattern(model)}`);
  if (filter.cursor) where.push(afterCursor(order, 'l.last_seen_at', 'l.provider_id', filter.cursor));
  const provider = conditions(filter, offlineAfterMs, 'clock');
  const page = provider.length === 0 ? sql`LIMIT ${filter.limit + 1}` : sql``;
  // The provider row is probed by key for each narrow row, in clock order (the fence, OFFSET 0, as in `CLOCK`).
  return sql`
    SELECT p.*, c.last_seen_at, c.last_seen_at AS sort_key
    FROM (SELECT l.provider_id, l.last_seen_at FROM provider_liveness l ${whereAll(where)}
      ORDER BY l.last_seen_at ${order.direction}, l.provider_id ${order.direction} ${page}) c
    CROSS JOIN LATERAL (
      SELECT p.* FROM providers p
      ${whereAll([sql<boolean>`p.id = c.provider_id`, ...provider])} OFFSET 0) p
    ORDER BY c.last_seen_at ${order.direction}, c.provider_id ${order.direction}
    LIMIT ${filter.limit + 1}`;
}

/** The distinct model names, `model_names(model)`, read by skipping through the model index (one probe per name). */
const MODEL_NAMES = sql`model_names AS (
      (SELECT model FROM provider_models ORDER BY model LIMIT 1)
      UNION ALL
      SELECT (SELECT pm.model FROM provider_models pm WHERE pm.model > n.model ORDER BY pm.model LIMIT 1)
      FROM model_names n WHERE n.model IS NOT NULL
    )`;

/** Lowercased model names containing `term`, in order. */
async function matchingModels(db: Kysely<RegistryDB>, term: string): Promise<string[]> {
  const { rows } = await sql<{ model: string }>`
    WITH RECURSIVE ${MODEL_NAMES}
    SELECT model FROM model_names WHERE model LIKE ${containsPattern(term)} ORDER BY model`.execute(db);
  return rows.map((r) => r.model);
}

/**
 * The most terms `ModelNames` remembers (each with at most MAX_MODEL_RANGES names); past it, it starts again: a term
 * forgotten costs its next page one more round trip.
 */
const MAX_TERMS = 1_000;

/**
 * The model names each `gpu_model` term matched when last asked (lowercased, in order), so that its next page is one
 * statement instead of two: the statement reads the names again (a skip through the model index) and renders the page
 * only when they are still those it was built for; when they changed it says so, and the page is asked again with the
 * names read anew. Exact either way: the names and the page are read in one snapshot.
 */
export class ModelNames {
  private readonly byTerm = new Map<string, string[]>();

  get(term: string): string[] | undefined {
    return this.byTerm.get(term);
  }

  set(term: string, models: string[]): void {
    if (this.byTerm.size >= MAX_TERMS && !this.byTerm.has(term)) this.byTerm.clear();
    this.byTerm.set(term, models);
  }
}

export interface DiscoveryPage {
  /** The page's providers, each as the API's JSON of a Provider, ready to send. */
  items: string[];
  /** Where the next page starts; undefined on the last page. */
  next?: Cursor;
}

type PageRow = { id: string; sort_value: string; json: string };

/**
 * The page's rows rendered as the API's JSON, in sort order (`page` names its rows `p`, with their `sort_key`);
 * `sortKey`: with the sort key too, for a statement that orders them again.
 */
function renderedPage(offlineAfterMs: number, order: Order, page: RawBuilder<unknown>, sortKey = false) {
  return sql<PageRow>`
    SELECT p.id, ${sortKey ? sql`p.sort_key, ` : sql``}${sortValueText(order.key, sql`p.sort_key`)} AS sort_value, ${providerJsonSql(offlineAfterMs)} AS json
    FROM (${page}) p
    ORDER BY p.sort_key ${order.direction}, p.id ${order.direction}`;
}

function pageOf(filter: DiscoveryFilter, rows: PageRow[]): DiscoveryPage {
  const shown = rows.slice(0, filter.limit);
  const last = shown.at(-1);
  return {
    items: shown.map((r) => r.json),
    next: rows.length > filter.limit && last ? { sort: filter.sort, value: last.sort_value, id: last.id } : undefined,
  };
}

/**
 * The model walk's page in one statement, built for `models` (what the term matched when last asked): undefined when
 * the term matches other names now (PostgreSQL still walks the page then, and drops it: names change rarely).
 */
async function modelPageIfSame(
  db: Kysely<RegistryDB>,
  filter: DiscoveryFilter,
  offlineAfterMs: number,
  order: Order,
  term: string,
  models: string[],
): Promise<DiscoveryPage | undefined> {
  const page = renderedPage(offlineAfterMs, order, modelWalk(filter, offlineAfterMs, order, models), true);
  const { rows } = await sql<{ same: boolean } & Partial<PageRow>>`
    WITH RECURSIVE ${MODEL_NAMES},
    asked AS (
      SELECT coalesce(array_agg(model ORDER BY model), '{}') = ${models}::text[] AS same
      FROM model_names WHERE model LIKE ${containsPattern(term)}
    )
    SELECT asked.same, r.id, r.sort_value, r.json
    FROM asked LEFT JOIN LATERAL (${page}) r ON asked.same
    ORDER BY r.sort_key ${order.direction}, r.id ${order.direction}`.execute(db);
  if (!rows[0]?.same) return undefined;
  return pageOf(
    filter,
    rows.filter((r): r is { same: boolean } & PageRow => r.id != null),
  );
}

/**
 * A page of discovery. `names` (the caller's, kept between calls) saves a `gpu_model` term's page its first round
 * trip, the lookup of the model names it matches.
 */
export async function listProviders(
  db: Kysely<RegistryDB>,
  filter: DiscoveryFilter,
  offlineAfterMs: number,
  names?: ModelNames,
): Promise<DiscoveryPage> {
  const order = orderOf(filter);
  let page: RawBuilder<unknown> | undefined;
  if (filter.gpu_model !== undefined && order.key !== 'last_seen_at') {
    const term = foldCase(filter.gpu_model);
    const known = names?.get(term);
    if (known !== undefined) {
      const same = await modelPageIfSame(db, filter, offlineAfterMs, order, term, known);
      if (same) return same;
    }
    const models = await matchingModels(db, term);
    // Only lists the model walk takes are remembered (1 to MAX_MODEL_RANGES names: a term that matches none costs
    // this one statement anyway).
    if (models.length > 0 && models.length <= MAX_MODEL_RANGES) names?.set(term, models);
    if (models.length === 0) return { items: [] };
    if (models.length <= MAX_MODEL_RANGES) page = modelWalk(filter, offlineAfterMs, order, models);
  }
  if (order.key === 'last_seen_at') page = clockWalk(filter, offlineAfterMs, order);
  page ??= providerWalk(filter, offlineAfterMs, order);
  // The page's rows are rendered as they come out of the walk (named `p`, as the renderer expects).
  const { rows } = await renderedPage(offlineAfterMs, order, page).execute(db);
  return pageOf(filter, rows);
}
