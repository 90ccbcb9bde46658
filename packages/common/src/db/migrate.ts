/**
 * The one migration runner. Migrations are plain objects written against
 * `Kysely<any>` (frozen: never the app's current types). Kysely's migrator
 * takes a lock, so several instances may start at once. A database that has
 * every migration already is left alone, without the migrator (which would
 * create its tables if missing): a service running as a role that may not
 * create tables starts on a database its migration step made (db/roles.ts).
 */
import { type Kysely, type Migration, Migrator, sql } from 'kysely';
import type { Logger } from 'pino';

/** The migrator's tables of a service: its migrations and their lock. */
export function migrationTables(service: string): [string, string] {
  const table = service.replaceAll('-', '_');
  return [`${table}_migrations`, `${table}_migrations_lock`];
}

/**
 * Kysely's migrator over a service's migrations, on its own tables (`migrationTables`): the one the service starts
 * with, and the one a test takes to migrate to a given migration, or down.
 */
export function serviceMigrator(db: Kysely<unknown>, service: string, migrations: Record<string, Migration>): Migrator {
  const [migrationTableName, migrationLockTableName] = migrationTables(service);
  return new Migrator({
    // biome-ignore lint/suspicious/noExplicitAny: migrations are frozen and written against Kysely<any>
    db: db as Kysely<any>,
    provider: { getMigrations: async () => migrations },
    migrationTableName,
    migrationLockTableName,
  });
}

/** Whether every one of `names` is recorded as applied. */
async function upToDate(db: Kysely<unknown>, table: string, names: string[]): Promise<boolean> {
  const { rows } = await sql<{ present: boolean }>`SELECT to_regclass(${table}) IS NOT NULL AS present`.execute(db);
  if (!rows[0]?.present) return false;
  const done = await sql<{ name: string }>`SELECT name FROM ${sql.table(table)}`.execute(db);
  const applied = new Set(done.rows.map((r) => r.name));
  return names.every((n) => applied.has(n));
}

export async function migrateToLatest(
  db: Kysely<unknown>,
  service: string,
  migrations: Record<string, Migration>,
  log?: Logger,
): Promise<void> {
  const [migrationTableName] = migrationTables(service);
  if (await upToDate(db, migrationTableName, Object.keys(migrations))) return;
  const { error, results } = await serviceMigrator(db, service, migrations).migrateToLatest();
  for (const r of results ?? []) {
    if (r.status === 'Success') log?.info({ migration: r.migrationName }, 'migration applied');
    if (r.status === 'Error') log?.error({ migration: r.migrationName }, 'migration failed');
  }
  if (error) throw error instanceof Error ? error : new Error(String(error));
}
