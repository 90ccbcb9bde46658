/**
 * What a run of heartbeats wrote, from PostgreSQL's table statistics (`pg_stat_user_tables`): row updates on each
 * table the heartbeat path writes, how many were HOT (heap-only: no index entry), and the index entries the others
 * wrote (a non-HOT update adds one to every index of its table).
 *
 * Statistics reach the shared view lazily: a backend flushes its counts at the end of a transaction at most once a
 * second, and an idle one within 10 s (PGSTAT_IDLE_INTERVAL). `settle` waits that long before reading, and the reader
 * drops its own cached snapshot (`pg_stat_clear_snapshot`).
 */
import type pg from 'pg';

/** The tables a heartbeat may write: the provider row and (since issue #29) its narrow liveness row. */
const TABLES = ['providers', 'provider_liveness'];

interface TableWrites {
  updates: number;
  hot: number;
  indexes: number;
}

export type WriteCounts = Map<string, TableWrites>;

/** Waits until every backend has flushed its statistics (the idle flush interval and a margin). */
export const settle = () => new Promise((r) => setTimeout(r, 11_000));

/** The update counters of the heartbeat's tables now (tables that do not exist are absent). */
export async function writeCounts(pool: pg.Pool): Promise<WriteCounts> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_stat_force_next_flush()');
    await client.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await client.query<{ name: string; updates: string; hot: string; indexes: number }>(
      `SELECT s.relname AS name, s.n_tup_upd AS updates, s.n_tup_hot_upd AS hot,
              (SELECT count(*)::int FROM pg_index i WHERE i.indrelid = s.relid) AS indexes
       FROM pg_stat_user_tables s WHERE s.relname = ANY($1)`,
      [TABLES],
    );
    return new Map(rows.map((r) => [r.name, { updates: Number(r.updates), hot: Number(r.hot), indexes: r.indexes }]));
  } finally {
    client.release();
  }
}

/**
 * The writes between two readings, per heartbeat: for each table, its updates, the HOT share and the index entries
 * written; with the index entries of all tables together.
 */
export function perHeartbeat(before: WriteCounts, after: WriteCounts, heartbeats: number) {
  const tables = [...after].map(([name, a]) => {
    const b = before.get(name) ?? { updates: 0, hot: 0, indexes: a.indexes };
    const updates = a.updates - b.updates;
    const hot = a.hot - b.hot;
    return {
      name,
      indexes: a.indexes,
      updates: updates / heartbeats,
      hotShare: updates > 0 ? hot / updates : Number.NaN,
      indexEntries: ((updates - hot) * a.indexes) / heartbeats,
    };
  });
  return { tables, indexEntries: tables.reduce((n, t) => n + t.indexEntries, 0) };
}

/** One line of markdown: each table's updates per heartbeat, HOT share and index entries, and their total. */
export function describeWrites(w: ReturnType<typeof perHeartbeat>): string {
  const pct = (x: number) => (Number.isNaN(x) ? '–' : `${(x * 100).toFixed(0)} % HOT`);
  const parts = w.tables.map(
    (t) =>
      `\`${t.name}\` ${t.updates.toFixed(2)} updates (${pct(t.hotShare)}, ${t.indexes} indexes) → ${t.indexEntries.toFixed(2)} index entries`,
  );
  return `${parts.join('; ')}; ${w.indexEntries.toFixed(2)} index entries in all`;
}
