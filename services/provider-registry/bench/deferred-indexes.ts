/**
 * Bulk loading without index maintenance: the tables' indexes and key
 * constraints are dropped before the load and built again after it, from
 * their own definitions as PostgreSQL reports them (`pg_get_indexdef`,
 * `pg_get_constraintdef`), so the schema the benchmark queries is the
 * migrations' exactly (checked after the rebuild).
 *
 * Why: at a million providers, inserting four million GPU rows into a table
 * with its primary key, foreign key and trigger in place keeps a random-order
 * B-tree per index up to date row by row and checks every row's provider
 * (a lookup per row); a built index is one sort per index, and an added foreign
 * key is one join.
 */
import type pg from 'pg';

interface Definition {
  name: string;
  drop: string;
  create: string;
}

/** Every index and constraint of `tables`, sorted: what the schema has, to compare before and after. */
async function definitions(client: pg.ClientBase, tables: string[]): Promise<string[]> {
  const { rows } = await client.query<{ def: string }>(
    `SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid::regclass::text = ANY($1)
     UNION ALL
     SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
     WHERE conrelid::regclass::text = ANY($1)
     ORDER BY 1`,
    [tables],
  );
  return rows.map((r) => r.def);
}

/**
 * Runs `load` on `tables` with their indexes, primary keys, unique constraints and the foreign keys from or to them
 * dropped, then restores them all (keys, then indexes, then foreign keys, which validate in one join each), in the
 * caller's transaction. Throws if the restored indexes or constraints differ from the ones found.
 */
export async function withDeferredIndexes<T>(
  client: pg.ClientBase,
  tables: string[],
  load: () => Promise<T>,
): Promise<T> {
  const before = await definitions(client, tables);
  const constraints = await client.query<Definition & { kind: string }>(
    `SELECT conname AS name, contype AS kind,
            format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname) AS drop,
            format('ALTER TABLE %s ADD CONSTRAINT %I %s', conrelid::regclass, conname, pg_get_constraintdef(oid)) AS create
     FROM pg_constraint
     WHERE (contype IN ('p', 'u') AND conrelid::regclass::text = ANY($1))
        OR (contype = 'f' AND (conrelid::regclass::text = ANY($1) OR confrelid::regclass::text = ANY($1)))
     ORDER BY conname`,
    [tables],
  );
  const indexes = await client.query<Definition>(
    `SELECT indexrelid::regclass::text AS name, format('DROP INDEX %s', indexrelid::regclass) AS drop,
            pg_get_indexdef(indexrelid) AS create
     FROM pg_index i
     WHERE indrelid::regclass::text = ANY($1)
       AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u', 'x'))
     ORDER BY 1`,
    [tables],
  );
  const foreign = constraints.rows.filter((c) => c.kind === 'f');
  const keys = constraints.rows.filter((c) => c.kind !== 'f');
  for (const d of [...foreign, ...indexes.rows, ...keys]) await client.query(d.drop);
  const result = await load();
  for (const d of [...keys, ...indexes.rows, ...foreign]) await client.query(d.create);
  const after = await definitions(client, tables);
  if (after.join('\n') !== before.join('\n')) {
    throw new Error(
      `indexes and constraints not restored as they were:\n${before.join('\n')}\n--- now ---\n${after.join('\n')}`,
    );
  }
  return result;
}
