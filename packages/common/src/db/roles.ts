/**
 * Who may do what in the database of a service that keeps an audit trail (auth, billing). Three roles:
 *
 * - the **owner**, which owns the schema and runs the migrations (`database.migration_url`): it alone can change the
 *   tables, disable a trigger or rewrite the trail, so the service never runs as it;
 * - the service's own **runtime** role (`database.url`), granted after each migration what the service needs: every
 *   table's rows, except the audit trail, which it may only append to and read (`audit_events`: INSERT, SELECT;
 *   `audit_chain`: SELECT), and the migration records, which it may only read;
 * - the **purge** role (`audit.purge_url`), which may delete audit events, and the database lets it delete only those
 *   past the retention, from the start of the chain (audit-chain.ts).
 *
 * `migrateServiceDatabase` migrates through the owner's URL when one is set and grants the other two (named by their
 * URLs' user names); without one, the service migrates with its own connection, as the owner: the embedded PGlite
 * database and quick set-ups, where `auditTrailExposure` names why the service could rewrite its trail (logged at
 * start-up). A production set-up runs the migration step alone (`database.migrate_only`: an init container, a job)
 * with the owner's URL and the service without it.
 */
import { type Kysely, type Migration, sql } from 'kysely';
import type { Logger } from 'pino';
import { setAuditRetention } from './audit-trail.ts';
import { type Database, type DatabaseSection, databaseOptions, openDatabase } from './database.ts';
import { migrateToLatest, migrationTables } from './migrate.ts';

/** The `database` keys of a service that keeps an audit trail, beside common's `databaseShape` (config-schema.ts). */
export interface MigrationSection {
  /** postgres:// URL of the schema's owner, for the migrations; empty: the service migrates through `url`. */
  migration_url: string;
  /** Migrate (and grant), then exit: a deployment's migration step. */
  migrate_only: boolean;
}

/** The user name of a postgres:// URL (null without one). */
export function roleOf(url: string): string | null {
  if (!url) return null;
  return decodeURIComponent(new URL(url).username) || null;
}

/**
 * Grants the runtime role what the service needs and no more (see above), and the purge role its deletion; run by the
 * owner after each migration, so new tables are granted too. A role that is the owner itself is left alone.
 */
export async function grantServiceRoles<DB>(
  db: Kysely<DB>,
  roles: { runtime: string | null; purge: string | null },
  service: string,
): Promise<void> {
  const { rows } = await sql<{
    schema: string;
    me: string;
  }>`SELECT current_schema() AS schema, current_user AS me`.execute(db);
  const { schema, me } = rows[0]!;
  const trail = (await sql<{ present: boolean }>`SELECT to_regclass('audit_events') IS NOT NULL AS present`.execute(db))
    .rows[0]!.present;
  const [migrations, lock] = migrationTables(service);
  const runtime = roles.runtime && roles.runtime !== me ? sql.id(roles.runtime) : null;
  const purge = roles.purge && roles.purge !== me ? sql.id(roles.purge) : null;
  const ns = sql.id(schema);
  if (runtime) {
    for (const statement of [
      sql`GRANT USAGE ON SCHEMA ${ns} TO ${runtime}`,
      sql`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${ns} TO ${runtime}`,
      sql`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${ns} TO ${runtime}`,
      sql`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ${sql.table(migrations)}, ${sql.table(lock)} FROM ${runtime}`,
    ]) {
      await statement.execute(db);
    }
    if (trail) {
      await sql`REVOKE ALL ON audit_events, audit_chain FROM ${runtime}`.execute(db);
      await sql`GRANT SELECT, INSERT ON audit_events TO ${runtime}`.execute(db);
      await sql`GRANT SELECT ON audit_chain TO ${runtime}`.execute(db);
    }
  }
  if (purge && trail) {
    await sql`GRANT USAGE ON SCHEMA ${ns} TO ${purge}`.execute(db);
    await sql`REVOKE ALL ON audit_events, audit_chain FROM ${purge}`.execute(db);
    await sql`GRANT SELECT, DELETE ON audit_events TO ${purge}`.execute(db);
    await sql`GRANT SELECT ON audit_chain TO ${purge}`.execute(db);
  }
}

/**
 * Why the connection's role could rewrite the audit trail (it is a superuser, or owns the table: it can disable its
 * triggers), or null when it cannot.
 */
export async function auditTrailExposure<DB>(db: Kysely<DB>): Promise<string | null> {
  const { rows } = await sql<{ role: string; superuser: boolean; owner: boolean }>`
    SELECT current_user AS role, r.rolsuper AS superuser, pg_has_role(current_user, c.relowner, 'MEMBER') AS owner
      FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'audit_events'::regclass`.execute(db);
  const row = rows[0];
  if (!row) return null;
  if (row.superuser) return `the database role ${row.role} is a superuser`;
  if (row.owner) return `the database role ${row.role} owns audit_events`;
  return null;
}

/**
 * Migrates the service's database: through `migration_url` as the owner when it is set (then writes the trail's
 * retention and grants the runtime role of `url` and the purge role of `purgeUrl`), else through the service's own
 * connection (writing the retention when that role may).
 */
export async function migrateServiceDatabase<DB>(opts: {
  database: Database<DB>;
  section: DatabaseSection & MigrationSection;
  service: string;
  migrations: Record<string, Migration>;
  /** Set for a service that keeps an audit trail: `audit.retention` in milliseconds, and `audit.purge_url`. */
  audit?: { retentionMs: number; purgeUrl: string };
  logger?: Logger;
}): Promise<void> {
  const { section, service, migrations, audit, logger } = opts;
  if (!section.migration_url) {
    await migrateToLatest(opts.database.db as Kysely<unknown>, service, migrations, logger);
    const writable = audit
      ? (
          await sql<{ ok: boolean }>`SELECT has_table_privilege('audit_chain', 'UPDATE') AS ok`.execute(
            opts.database.db,
          )
        ).rows[0]!.ok
      : false;
    if (audit && writable) await setAuditRetention(opts.database.db, audit.retentionMs);
    return;
  }
  if (!section.url) throw new Error('database.migration_url needs database.url: the role the service runs as');
  const owner = await openDatabase<unknown>(databaseOptions({ ...section, url: section.migration_url, pool_size: 1 }));
  try {
    await migrateToLatest(owner.db, service, migrations, logger);
    if (audit) await setAuditRetention(owner.db, audit.retentionMs);
    await grantServiceRoles(owner.db, { runtime: roleOf(section.url), purge: roleOf(audit?.purgeUrl ?? '') }, service);
    logger?.info({ runtime: roleOf(section.url), purge: roleOf(audit?.purgeUrl ?? '') }, 'database roles granted');
  } finally {
    await owner.close();
  }
}
