/**
 * The registry's database functions and triggers, as they are now: one current definition each, applied after the
 * migrations at every start (`applyDefinitions`). Tables, columns and indexes live in the frozen migrations; the
 * functions that keep offers, uptime and liveness in step with them live here, so the text of `offers_refresh_gpus`
 * is in one place, not wherever a migration last redefined it. To change one: edit it here (a migration may still
 * create one that a data backfill needs, and this file then takes it over). `test/definitions.test.ts` holds the
 * database to exactly this list.
 *
 * A definition that already matches is left alone, so a start takes no table lock for a trigger nothing changed;
 * instances starting together apply under one advisory lock.
 */
import { hourlyPrice, type Logger, NEUTRAL_FACTOR, RATE_LOOKUP, sqlPriceArithmetic, UNPRICED_RATE } from '@gpu/common';
import { type Kysely, sql } from 'kysely';

/** A function: `name(arguments)` as PostgreSQL states its identity, and the rest of its definition. */
export interface FunctionDefinition {
  name: string;
  /** As `pg_get_function_identity_arguments` writes them: `p_id uuid, p_idx integer`. */
  args: string;
  returns: string;
  /** `LANGUAGE sql STABLE`, `LANGUAGE plpgsql SET timezone TO 'UTC'`… */
  attributes: string;
  body: string;
}

/** A row trigger: when it fires, on which table, and the function it runs. */
export interface TriggerDefinition {
  name: string;
  table: string;
  /** `AFTER UPDATE OF status ON`… without the table: `AFTER UPDATE OF status`. */
  timing: string;
  when?: string;
  fn: string;
}

/** Base rates looked up in the platform's order (`RATE_LOOKUP`): `pp` is the machine's prices, `c` the card. */
const baseRateSql = `coalesce(${RATE_LOOKUP.map(
  (step) =>
    `${step.table === 'provider' ? 'pp' : 'c'}.base_rates ->> ${step.key === 'model' ? 'p_model_key' : `'default'`}`,
).join(', ')}, '${UNPRICED_RATE}')::numeric`;

const factorSql = (factor: 'demand' | 'supply') =>
  `coalesce(c.factors -> p_model_key ->> '${factor}', c.factors -> 'default' ->> '${factor}', '${NEUTRAL_FACTOR}')::numeric`;

const vramRateSql = 'coalesce(pp.vram_rate_per_gb_hour, c.vram_rate_per_gb_hour)';
const powerRateSql = 'coalesce(pp.power_rate_per_watt_hour, c.power_rate_per_watt_hour)';

/** One GPU-hour of a group, by the platform's price formula (`hourlyPrice` in @gpu/common), and its parts. */
const offerPrice = hourlyPrice(sqlPriceArithmetic, {
  baseRatePerGpu: baseRateSql,
  gpus: sqlPriceArithmetic.constant('1'),
  vramMb: 'p_avg_vram_mb',
  vramRatePerGbHour: vramRateSql,
  powerW: 'p_avg_power_w',
  powerRatePerWattHour: powerRateSql,
  demand: factorSql('demand'),
  supply: factorSql('supply'),
});
const offerPriceSql = offerPrice.total;

/** Whose rate priced a part: the machine's own (`pp`, when it set one) or the platform's card. */
const sourceSql = (own: string) => `CASE WHEN ${own} IS NOT NULL THEN 'provider' ELSE 'platform' END`;
const ownBaseRateSql = `coalesce(${RATE_LOOKUP.filter((step) => step.table === 'provider')
  .map((step) => `pp.base_rates ->> ${step.key === 'model' ? 'p_model_key' : `'default'`}`)
  .join(', ')})`;

/**
 * What a GPU-hour of a group is made of, as `offer_price` adds it up (the same expressions): the model's base rate,
 * the VRAM part (the GPUs' average VRAM at the VRAM rate) and the power part, each rate's source, and the market's
 * factors. `(base + vram + power) × demand × supply` is the price.
 */
const offerPricePartsSql = `jsonb_build_object(
  'base', trim_scale(${offerPrice.base})::text,
  'base_source', ${sourceSql(ownBaseRateSql)},
  'vram', trim_scale(${offerPrice.vram})::text,
  'vram_gb', trim_scale(round(p_avg_vram_mb / 1024, 3))::text,
  'vram_rate_per_gb_hour', trim_scale(${vramRateSql})::text,
  'vram_rate_source', ${sourceSql('pp.vram_rate_per_gb_hour')},
  'power', trim_scale(${offerPrice.power})::text,
  'power_w', trim_scale(round(p_avg_power_w, 3))::text,
  'power_rate_per_watt_hour', trim_scale(${powerRateSql})::text,
  'power_rate_source', ${sourceSql('pp.power_rate_per_watt_hour')},
  'demand_multiplier', trim_scale(${factorSql('demand')})::text,
  'supply_factor', trim_scale(${factorSql('supply')})::text)`;

/** In dependency order: a SQL function's body is checked when it is created, so what it calls comes first. */
export const FUNCTIONS: readonly FunctionDefinition[] = [
  {
    // Each GPU's static description as the opening of its API JSON (no closing brace), rendered when the GPU is
    // written: discovery appends the live metrics. The text is what JSON.stringify writes for the same fields.
    name: 'gpu_spec_json',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  NEW.spec_json := concat(
    '{"model_name":', coalesce(to_json(NEW.model_name)::text, 'null'),
    ',"vram":', coalesce(NEW.vram::text, 'null'),
    ',"driver_version":', coalesce(to_json(NEW.driver_version)::text, 'null'),
    ',"architecture":', coalesce(to_json(NEW.architecture)::text, 'null'),
    ',"compute_capability":', coalesce(to_json(NEW.compute_capability)::text, 'null'),
    ',"cuda_cores":', coalesce(NEW.cuda_cores::text, 'null'),
    ',"tensor_cores":', coalesce(NEW.tensor_cores::text, 'null'),
    ',"memory_bandwidth":', coalesce(NEW.memory_bandwidth::text, 'null'),
    ',"power_consumption":', coalesce(NEW.power_consumption::text, 'null'));
  RETURN NEW;
END
`,
  },
  {
    // A status's class for uptime: up, down, or neither (maintenance: the owner's own time).
    name: 'provider_status_class',
    args: 'status text',
    returns: 'text',
    attributes: 'LANGUAGE sql IMMUTABLE',
    body: `
SELECT CASE WHEN status IN ('idle', 'busy') THEN 'up' WHEN status IN ('offline', 'error') THEN 'down' END
`,
  },
  {
    // A machine's books over the last 30 days (the day rows and the open interval of its current status) and its
    // score, uptime × session success, each 1 while unobserved.
    name: 'provider_reliability_of',
    args: 'p_id uuid',
    returns:
      'TABLE(up_seconds double precision, down_seconds double precision, sessions_ended integer, sessions_failed integer, score double precision)',
    attributes: "LANGUAGE sql STABLE SET timezone TO 'UTC'",
    body: `
WITH books AS (
  SELECT
    coalesce(u.up, 0) + CASE WHEN provider_status_class(p.status) = 'up' THEN w.open ELSE 0 END AS up,
    coalesce(u.down, 0) + CASE WHEN provider_status_class(p.status) = 'down' THEN w.open ELSE 0 END AS down,
    coalesce(r.sessions_ended, 0) AS ended,
    coalesce(r.sessions_failed, 0) AS failed
  FROM providers p
  CROSS JOIN LATERAL (
    SELECT greatest(0, extract(epoch FROM now() - greatest(p.status_since, now() - interval '30 days')))::float8
      AS open
  ) w
  LEFT JOIN LATERAL (
    SELECT sum(pu.up_seconds)::float8 AS up, sum(pu.down_seconds)::float8 AS down FROM provider_uptime pu
    WHERE pu.provider_id = p.id AND pu.day > current_date - 30
  ) u ON true
  LEFT JOIN provider_reliability r ON r.provider_id = p.id
  WHERE p.id = p_id
)
SELECT up, down, ended, failed,
  (CASE WHEN up + down > 0 THEN up / (up + down) ELSE 1 END)
    * (CASE WHEN ended > 0 THEN (ended - failed)::float8 / ended ELSE 1 END)
FROM books
`,
  },
  {
    // Whether billing's newest statement of the machine's held GPUs names the GPU (domain/gpu-holds.ts).
    name: 'gpu_held',
    args: 'p_id uuid, p_idx integer',
    returns: 'boolean',
    attributes: 'LANGUAGE sql STABLE',
    body: `
SELECT EXISTS (SELECT 1 FROM gpu_holds h WHERE h.provider_id = p_id AND p_idx = ANY (h.gpu_indices))
`,
  },
  {
    // The unrented GPUs while the machine is idle and they are at least its minimum, else none.
    name: 'offer_free_gpus',
    args: 'p_status text, p_unrented integer, p_min integer',
    returns: 'integer',
    attributes: 'LANGUAGE sql IMMUTABLE',
    body: `
SELECT CASE WHEN p_status = 'idle' AND p_unrented >= p_min THEN p_unrented ELSE 0 END
`,
  },
  {
    // A GPU-hour of a group as billing prices it (the machine's own rates before the card's); null until a card
    // arrived.
    name: 'offer_price',
    args: 'p_id uuid, p_model_key text, p_avg_vram_mb numeric, p_avg_power_w numeric',
    returns: 'numeric',
    attributes: 'LANGUAGE sql STABLE',
    body: `
SELECT ${offerPriceSql}
FROM price_card c LEFT JOIN provider_prices pp ON pp.provider_id = p_id
WHERE c.id = 1
`,
  },
  {
    // What `offer_price` is made of, for an offer to explain its price; null until a card arrived.
    name: 'offer_price_parts',
    args: 'p_id uuid, p_model_key text, p_avg_vram_mb numeric, p_avg_power_w numeric',
    returns: 'jsonb',
    attributes: 'LANGUAGE sql STABLE',
    body: `
SELECT ${offerPricePartsSql}
FROM price_card c LEFT JOIN provider_prices pp ON pp.provider_id = p_id
WHERE c.id = 1
`,
  },
  {
    // A machine's reliability on its offers, from its books.
    name: 'offers_refresh_reliability',
    args: 'p_id uuid',
    returns: 'void',
    attributes: 'LANGUAGE sql',
    body: `
UPDATE offers o SET
  reliability = r.score,
  uptime_30d = CASE WHEN r.up_seconds + r.down_seconds > 0
    THEN r.up_seconds / (r.up_seconds + r.down_seconds) END,
  observed_seconds_30d = r.up_seconds + r.down_seconds,
  sessions_ended = r.sessions_ended,
  sessions_failed = r.sessions_failed
FROM provider_reliability_of(p_id) r
WHERE o.provider_id = p_id
`,
  },
  {
    // A group's GPUs as billing rents and prices them: its healthy ones (those of the group's model key), those no
    // active session holds, their VRAM and power per GPU (power only when every one reports it), the smallest VRAM;
    // and the price that follows. One function for every writer of the group.
    name: 'offers_refresh_gpus',
    args: 'p_id uuid',
    returns: 'void',
    attributes: 'LANGUAGE sql',
    body: `
UPDATE offers o SET
  gpu_count = a.n,
  healthy_gpus = a.healthy,
  unrented_gpus = a.unrented,
  min_gpus_per_rental = a.min_gpus,
  free_gpus = offer_free_gpus(o.status, a.unrented, a.min_gpus),
  vram_mb = a.min_vram,
  avg_vram_mb = a.avg_vram,
  avg_power_w = a.avg_power,
  price_per_gpu_hour = offer_price(o.provider_id, o.model_key, a.avg_vram, a.avg_power)
FROM (
  SELECT g.model_key, g.n, g.healthy, g.unrented, g.min_vram,
    (SELECT p.min_gpus_per_rental FROM providers p WHERE p.id = p_id) AS min_gpus,
    CASE WHEN g.healthy > 0 THEN g.vram_sum::numeric / g.healthy ELSE 0 END AS avg_vram,
    CASE WHEN g.healthy > 0 AND g.power_known THEN g.power_sum::numeric / g.healthy ELSE 0 END AS avg_power
  FROM (
    SELECT o2.model_key, count(*)::int AS n, (count(*) FILTER (WHERE gp.is_healthy))::int AS healthy,
      (count(*) FILTER (WHERE gp.is_healthy AND NOT gpu_held(p_id, gp.idx)))::int AS unrented,
      coalesce(min(gp.vram) FILTER (WHERE gp.is_healthy), min(gp.vram)) AS min_vram,
      coalesce(sum(gp.vram) FILTER (WHERE gp.is_healthy), 0) AS vram_sum,
      coalesce(bool_and(gp.power_consumption IS NOT NULL) FILTER (WHERE gp.is_healthy), false) AS power_known,
      coalesce(sum(gp.power_consumption) FILTER (WHERE gp.is_healthy), 0) AS power_sum
    FROM offers o2 JOIN gpus gp ON gp.provider_id = o2.provider_id AND gp.model_name = ANY (o2.model_names)
    WHERE o2.provider_id = p_id
    GROUP BY o2.model_key
  ) g
) a
WHERE o.provider_id = p_id AND o.model_key = a.model_key
`,
  },
  {
    // A session started, ended or restated its GPUs: the groups' unrented GPUs, and so their free ones (rows that
    // change only; the price does not depend on rentals).
    name: 'offers_refresh_rented',
    args: 'p_id uuid',
    returns: 'void',
    attributes: 'LANGUAGE sql',
    body: `
UPDATE offers o SET
  unrented_gpus = a.unrented,
  free_gpus = offer_free_gpus(o.status, a.unrented, o.min_gpus_per_rental)
FROM (
  SELECT o2.model_key, (count(*) FILTER (WHERE gp.is_healthy AND NOT gpu_held(p_id, gp.idx)))::int AS unrented
  FROM offers o2 JOIN gpus gp ON gp.provider_id = o2.provider_id AND gp.model_name = ANY (o2.model_names)
  WHERE o2.provider_id = p_id
  GROUP BY o2.model_key
) a
WHERE o.provider_id = p_id AND o.model_key = a.model_key AND o.unrented_gpus IS DISTINCT FROM a.unrented
`,
  },
  {
    // Every status change that crosses classes (idle↔busy stays up and writes nothing) adds the interval it closes,
    // split by UTC day, and starts the next. A machine swept offline was last heard from at its liveness clock: its
    // up time ends there. Only the last 31 days are ever read.
    name: 'providers_track_uptime',
    args: '',
    returns: 'trigger',
    attributes: "LANGUAGE plpgsql SET timezone TO 'UTC'",
    body: `
DECLARE
  old_class text := provider_status_class(OLD.status);
  boundary timestamptz := now();
  since timestamptz;
BEGIN
  IF old_class IS NOT DISTINCT FROM provider_status_class(NEW.status) THEN
    RETURN NEW;
  END IF;
  IF old_class = 'up' AND NEW.status = 'offline' THEN
    boundary := LEAST(GREATEST((SELECT l.last_seen_at FROM provider_liveness l WHERE l.provider_id = OLD.id),
      OLD.status_since), now());
  END IF;
  since := GREATEST(OLD.status_since, now() - interval '31 days');
  IF old_class IS NOT NULL AND boundary > since THEN
    INSERT INTO provider_uptime (provider_id, day, up_seconds, down_seconds)
    SELECT NEW.id, d.day::date,
      CASE WHEN old_class = 'up' THEN d.seconds ELSE 0 END,
      CASE WHEN old_class = 'down' THEN d.seconds ELSE 0 END
    FROM (
      SELECT g AS day,
        extract(epoch FROM LEAST(boundary, g + interval '1 day') - GREATEST(since, g)) AS seconds
      FROM generate_series(date_trunc('day', since), boundary, interval '1 day') AS g
    ) d
    WHERE d.seconds > 0
    ON CONFLICT (provider_id, day) DO UPDATE SET
      up_seconds = provider_uptime.up_seconds + EXCLUDED.up_seconds,
      down_seconds = provider_uptime.down_seconds + EXCLUDED.down_seconds;
  END IF;
  NEW.status_since := boundary;
  RETURN NEW;
END
`,
  },
  {
    // The machine's status and its minimum decide which unrented GPUs are free; a change of status moves its
    // reliability (the uptime trigger wrote the interval it closed).
    name: 'providers_offer_status',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  UPDATE offers o SET
    status = NEW.status,
    min_gpus_per_rental = NEW.min_gpus_per_rental,
    free_gpus = offer_free_gpus(NEW.status, o.unrented_gpus, NEW.min_gpus_per_rental)
  WHERE o.provider_id = NEW.id;
  IF OLD.status IS DISTINCT FROM NEW.status THEN
    PERFORM offers_refresh_reliability(NEW.id);
  END IF;
  RETURN NULL;
END
`,
  },
  {
    // A GPU's health decides whether it can be rented, and what the group costs.
    name: 'gpus_offer_health',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  PERFORM offers_refresh_gpus(NEW.provider_id);
  RETURN NULL;
END
`,
  },
  {
    // Billing stated the machine's held GPUs anew: the groups' unrented GPUs, and so their free ones.
    name: 'gpu_holds_offer_gpus',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  IF TG_OP = 'INSERT' OR OLD.gpu_indices IS DISTINCT FROM NEW.gpu_indices THEN
    PERFORM offers_refresh_rented(NEW.provider_id);
  END IF;
  RETURN NULL;
END
`,
  },
  {
    // A machine's bid floor changed: copied onto its offers (`offers.bid_floor`: what the market filters and sorts
    // bids by). The machine's row first, as a writer of its offers holds it, so that offers being written meanwhile
    // are copied to once they commit (and one written after reads the new floor: `offers_bid_floor`); then its offers
    // in one order (the repricing's), then the copy.
    name: 'provider_prices_offer_bid_floor',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.bid_floor IS NOT DISTINCT FROM NEW.bid_floor THEN
    RETURN NULL;
  END IF;
  PERFORM 1 FROM providers WHERE id = NEW.provider_id FOR SHARE;
  PERFORM 1 FROM offers WHERE provider_id = NEW.provider_id ORDER BY model_key FOR UPDATE;
  UPDATE offers SET bid_floor = NEW.bid_floor
  WHERE provider_id = NEW.provider_id AND bid_floor IS DISTINCT FROM NEW.bid_floor;
  RETURN NULL;
END
`,
  },
  {
    // A new offer carries its machine's bid floor.
    name: 'offers_bid_floor',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  NEW.bid_floor := (SELECT pp.bid_floor FROM provider_prices pp WHERE pp.provider_id = NEW.provider_id);
  RETURN NEW;
END
`,
  },
  {
    // A provider's narrow liveness row (its heartbeat clock and copies of its status, model summary, owner and bound
    // daemon) is made with it.
    name: 'providers_liveness_insert',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  INSERT INTO provider_liveness (provider_id, status, gpu_models, owner_id, daemon_client_id)
  VALUES (NEW.id, NEW.status, NEW.gpu_models, NEW.owner_id, NEW.daemon_client_id);
  RETURN NULL;
END
`,
  },
  {
    // …and follows every change of the copies; a writer that has set the copy itself leaves nothing to copy.
    name: 'providers_liveness_status',
    args: '',
    returns: 'trigger',
    attributes: 'LANGUAGE plpgsql',
    body: `
BEGIN
  UPDATE provider_liveness SET status = NEW.status, gpu_models = NEW.gpu_models, owner_id = NEW.owner_id,
    daemon_client_id = NEW.daemon_client_id
  WHERE provider_id = NEW.id
    AND (status IS DISTINCT FROM NEW.status OR gpu_models IS DISTINCT FROM NEW.gpu_models
      OR owner_id IS DISTINCT FROM NEW.owner_id OR daemon_client_id IS DISTINCT FROM NEW.daemon_client_id);
  RETURN NULL;
END
`,
  },
];

export const TRIGGERS: readonly TriggerDefinition[] = [
  {
    name: 'gpus_spec_json',
    table: 'gpus',
    timing:
      'BEFORE INSERT OR UPDATE OF model_name, vram, driver_version, architecture, compute_capability, cuda_cores, tensor_cores, memory_bandwidth, power_consumption, spec_json',
    fn: 'gpu_spec_json',
  },
  {
    name: 'gpus_offer_health',
    table: 'gpus',
    timing: 'AFTER UPDATE OF is_healthy',
    when: 'OLD.is_healthy IS DISTINCT FROM NEW.is_healthy',
    fn: 'gpus_offer_health',
  },
  {
    name: 'providers_uptime',
    table: 'providers',
    timing: 'BEFORE UPDATE OF status',
    when: 'OLD.status IS DISTINCT FROM NEW.status',
    fn: 'providers_track_uptime',
  },
  {
    // `zz`: after the other AFTER triggers of the row (PostgreSQL fires them by name).
    name: 'providers_zz_offer_status',
    table: 'providers',
    timing: 'AFTER UPDATE OF status, min_gpus_per_rental',
    when: 'OLD.status IS DISTINCT FROM NEW.status OR OLD.min_gpus_per_rental IS DISTINCT FROM NEW.min_gpus_per_rental',
    fn: 'providers_offer_status',
  },
  {
    name: 'providers_liveness_insert',
    table: 'providers',
    timing: 'AFTER INSERT',
    fn: 'providers_liveness_insert',
  },
  {
    name: 'providers_liveness_status',
    table: 'providers',
    timing: 'AFTER UPDATE OF status, gpu_models, owner_id, daemon_client_id',
    when: 'OLD.status IS DISTINCT FROM NEW.status OR OLD.gpu_models IS DISTINCT FROM NEW.gpu_models OR OLD.owner_id IS DISTINCT FROM NEW.owner_id OR OLD.daemon_client_id IS DISTINCT FROM NEW.daemon_client_id',
    fn: 'providers_liveness_status',
  },
  {
    name: 'gpu_holds_offer_gpus',
    table: 'gpu_holds',
    timing: 'AFTER INSERT OR UPDATE',
    fn: 'gpu_holds_offer_gpus',
  },
  {
    name: 'provider_prices_offer_bid_floor',
    table: 'provider_prices',
    timing: 'AFTER INSERT OR UPDATE OF bid_floor',
    fn: 'provider_prices_offer_bid_floor',
  },
  {
    name: 'offers_bid_floor',
    table: 'offers',
    timing: 'BEFORE INSERT',
    fn: 'offers_bid_floor',
  },
];

function functionSql(f: FunctionDefinition): string {
  return `CREATE OR REPLACE FUNCTION ${f.name}(${f.args}) RETURNS ${f.returns} ${f.attributes} AS $fn$${f.body}$fn$`;
}

export function triggerSql(t: TriggerDefinition): string {
  const when = t.when === undefined ? '' : ` WHEN (${t.when})`;
  return `CREATE OR REPLACE TRIGGER ${t.name} ${t.timing} ON ${t.table} FOR EACH ROW${when} EXECUTE FUNCTION ${t.fn}()`;
}

/** A trigger's definition as PostgreSQL writes it back, reduced to compare with ours (case, spaces, parentheses). */
export function triggerShape(definition: string): string {
  return definition
    .toLowerCase()
    .replaceAll('public.', '')
    .replace(/[()\s]+/g, ' ')
    .trim();
}

/** What the database holds now: each function's body and arguments, each trigger's definition. */
export async function installedDefinitions(db: Kysely<unknown>): Promise<{
  functions: Map<string, { args: string; body: string }>;
  triggers: Map<string, string>;
}> {
  const fns = await sql<{ name: string; args: string; body: string }>`
    SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS args, p.prosrc AS body
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = current_schema()
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')`.execute(db);
  const trs = await sql<{ name: string; definition: string }>`
    SELECT t.tgname AS name, pg_get_triggerdef(t.oid) AS definition
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND NOT t.tgisinternal`.execute(db);
  return {
    functions: new Map(fns.rows.map((r) => [r.name, { args: r.args, body: r.body }])),
    triggers: new Map(trs.rows.map((r) => [r.name, r.definition])),
  };
}

/** The functions and triggers whose installed text differs from (or lacks) the current definition. */
export async function staleDefinitions(db: Kysely<unknown>): Promise<{
  functions: FunctionDefinition[];
  triggers: TriggerDefinition[];
}> {
  const installed = await installedDefinitions(db);
  return {
    functions: FUNCTIONS.filter((f) => {
      const now = installed.functions.get(f.name);
      return now === undefined || now.args !== f.args || now.body !== f.body;
    }),
    triggers: TRIGGERS.filter((t) => {
      const now = installed.triggers.get(t.name);
      return now === undefined || triggerShape(now) !== triggerShape(triggerSql(t).replace('OR REPLACE ', ''));
    }),
  };
}

/** Bring the database's functions and triggers to the current definitions (after the migrations). */
export async function applyDefinitions(db: Kysely<unknown>, log?: Logger): Promise<void> {
  if (!hasWork(await staleDefinitions(db))) return;
  await db.transaction().execute(async (trx) => {
    // Instances starting together: one applies, the others then find nothing to do.
    await sql`SELECT pg_advisory_xact_lock(hashtext('provider_registry_definitions'))`.execute(trx);
    const stale = await staleDefinitions(trx);
    for (const f of stale.functions) {
      await sql.raw(functionSql(f)).execute(trx);
      log?.info({ function: f.name }, 'database function defined');
    }
    for (const t of stale.triggers) {
      await sql.raw(triggerSql(t)).execute(trx);
      log?.info({ trigger: t.name }, 'database trigger defined');
    }
  });
}

const hasWork = (stale: { functions: unknown[]; triggers: unknown[] }) =>
  stale.functions.length > 0 || stale.triggers.length > 0;
