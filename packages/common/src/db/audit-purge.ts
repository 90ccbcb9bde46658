/**
 * A service's hourly round of its audit trail: the purge of events past the retention, through the purge role's own
 * connection (`audit.purge_url`; db/roles.ts) or, without one, the service's where its role may delete (the owner's,
 * in a quick set-up); and the chain's head in the log (at start-up too), where it outlives the database: `GET
 * …/audit/verify?seq=&hash=` with a logged head shows a chain recomputed from it on, or cut back before it.
 */
import { type Kysely, sql } from 'kysely';
import type { Logger } from 'pino';
import { auditChainHead, purgeAudit } from './audit-trail.ts';
import { openDatabase } from './database.ts';

export interface AuditRound {
  /** Purges (when a role may), then logs the head; failures are logged, never thrown. */
  run(): Promise<void>;
  close(): Promise<void>;
}

/** Prepares the round: opens the purge role's connection (one), or finds out whether the service's own may purge. */
export async function auditRound<DB>(opts: {
  db: Kysely<DB>;
  purgeUrl: string;
  /** `audit.retention`; 0: events are kept for ever (nothing is purged). */
  retentionMs: number;
  logger: Logger;
}): Promise<AuditRound> {
  const { logger } = opts;
  const purger =
    opts.retentionMs > 0 && opts.purgeUrl ? await openDatabase<unknown>({ url: opts.purgeUrl, poolSize: 1 }) : null;
  let purgeDb: Kysely<unknown> | null = purger?.db ?? null;
  if (opts.retentionMs > 0 && !purgeDb) {
    const { rows } = await sql<{ ok: boolean }>`SELECT has_table_privilege('audit_events', 'DELETE') AS ok`.execute(
      opts.db,
    );
    if (rows[0]?.ok) purgeDb = opts.db as Kysely<unknown>;
    else logger.warn('the audit trail is not purged: this role may not delete from it; set audit.purge_url');
  }
  const logHead = async () => {
    try {
      logger.info({ audit_chain_head: await auditChainHead(opts.db) }, 'audit trail head');
    } catch (err) {
      logger.warn({ err }, 'reading the audit trail head failed');
    }
  };
  // At start too: an instance restarted more often than hourly still leaves its heads in the log.
  await logHead();
  return {
    async run() {
      if (purgeDb) {
        try {
          const n = await purgeAudit(purgeDb);
          if (n > 0) logger.info({ deleted: n }, 'audit events past their retention purged');
        } catch (err) {
          logger.warn({ err }, 'purging the audit trail failed');
        }
      }
      await logHead();
    },
    async close() {
      await purger?.close();
    },
  };
}
