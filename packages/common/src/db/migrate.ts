/**
 * The one migration runner. Migrations are plain objects written against
 * `Kysely<any>` (frozen: never the app's current types). Kysely's migrator
 * takes a lock, so several instances may start at once.
 */
import type { Kysely, Migration } from 'kysely';
import type { Logger } from 'pino';

export async function migrateToLatest(
  db: Kysely<unknown>,
  service: string,
  migrations: Record<string, Migration>,
  log?: Logger,
): Promise<void> {
  const { Migrator } = await import('kysely');
  const table = service.replaceAll('-', '_');
  const migrator = new Migrator({
    // biome-ignore lint/suspicious/noExplicitAny: migrations are frozen and written against Kysely<any>
    db: db as Kysely<any>,
    provider: { getMigrations: async () => migrations },
    migrationTableName: `${table}_migrations`,
    migrationLockTableName: `${table}_migrations_lock`,
  });
  const { error, results } = await migrator.migrateToLatest();
  for (const r of results ?? []) {
    if (r.status === 'Success') log?.info({ migration: r.migrationName }, 'migration applied');
    if (r.status === 'Error') log?.error({ migration: r.migrationName }, 'migration failed');
  }
  if (error) throw error instanceof Error ? error : new Error(String(error));
}
