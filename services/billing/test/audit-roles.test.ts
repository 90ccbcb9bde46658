/**
 * Billing as a production set-up runs it (@gpu/common's db/roles.ts): the migration step alone, as the schema's owner
 * (`MIGRATE_ONLY`, `DATABASE_MIGRATION_URL`: the service process, as an init container runs it), then the service as a
 * role that owns nothing and may only append to and read its audit trail, and the purge as a third role that may
 * delete only what the database lets go past the retention. Against real PostgreSQL roles.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { auditRound, auditTrailExposure, createLogger, openDatabase, setAuditRetention } from '@gpu/common';
import { createRoleDatabase, gatherOutput, type RoleDatabase, untilOlder } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { type QueryExecutorProvider, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let rdb: RoleDatabase;
let h: BillingHarness;

/** The service's process with `env`, to its exit: its exit code and output. */
function run(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/billing/src/server.ts'], {
    cwd: join(import.meta.dirname, '../../..'),
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = gatherOutput(child);
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, output: output() })));
}

beforeAll(async () => {
  rdb = await createRoleDatabase('billing');
  const step = await run({
    MIGRATE_ONLY: 'true',
    DATABASE_URL: rdb.runtimeUrl,
    DATABASE_MIGRATION_URL: rdb.ownerUrl,
    AUDIT_PURGE_URL: rdb.purgeUrl,
    LOG_LEVEL: 'info',
  });
  expect(step.code, step.output).toBe(0);
  expect(step.output).toContain('database roles granted');
  h = await setupBilling({ config: { database: { url: rdb.runtimeUrl, pool_size: 5 } } });
}, 120_000);
afterAll(async () => {
  await h?.close();
  await rdb?.drop();
});

const refused = (statement: ReturnType<typeof sql>, db: QueryExecutorProvider = h.db) =>
  expect(statement.execute(db)).rejects.toMatchObject({ code: '42501' });

describe('billing under its own database role', () => {
  it('serves and appends to its trail, as a role that owns nothing', async () => {
    const { rows } = await sql<{ owner: string }>`
      SELECT tableowner AS owner FROM pg_tables WHERE tablename = 'audit_events'`.execute(h.db);
    expect(rows[0]!.owner).toBe(new URL(rdb.ownerUrl).username);
    expect(await auditTrailExposure(h.db)).toBeNull();

    const wallet = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: {
        owner_type: 'user',
        owner_id: crypto.randomUUID(),
        solana_address: Keypair.generate().publicKey.toBase58(),
      },
    });
    expect(wallet.statusCode, wallet.body).toBe(201);
    const pause = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/reserves/pause',
      payload: { reason: 'a drill' },
    });
    expect(pause.statusCode, pause.body).toBe(200);
    const trail = async () => (await h.app.inject({ url: '/api/v1/billing/audit?action=payouts_paused' })).json();
    let events = await trail();
    // Up to 20 s of polling (it stops once the event is there): a busy machine can be slow to write it.
    for (let i = 0; i < 400 && events.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      events = await trail();
    }
    // A pause writes no `requested` event first (it moves nothing, and must not wait for the trail).
    expect(events).toMatchObject([{ outcome: 'succeeded', actor_id: h.admin.id, details: { reason: 'a drill' } }]);
    const check = (await h.app.inject({ url: '/api/v1/billing/audit/verify' })).json();
    expect(check).toMatchObject({ intact: true, events: 1 });
  });

  it('cannot rewrite its trail: no update, deletion, truncation, trigger switched off or chain head moved', async () => {
    for (const statement of [
      sql`UPDATE audit_events SET action = 'nothing'`,
      sql`DELETE FROM audit_events`,
      sql`TRUNCATE audit_events`,
      sql`ALTER TABLE audit_events DISABLE TRIGGER USER`,
      sql`DROP TABLE audit_events`,
      sql`UPDATE audit_chain SET head_seq = 0`,
      sql`UPDATE audit_chain SET retention = '1 second'`,
      sql`SET session_replication_role = replica`,
      sql`DELETE FROM billing_service_migrations`,
    ]) {
      await refused(statement);
    }
    await expect(
      h.db.transaction().execute(async (trx) => {
        await sql`SELECT set_config('audit.purge', 'on', true)`.execute(trx);
        await sql`DELETE FROM audit_events`.execute(trx);
      }),
    ).rejects.toMatchObject({ code: '42501' });
  });

  it('has its trail purged by the purge role, of what is past the retention only', async () => {
    const logger = createLogger({ service: 't', instanceId: 't', level: 'silent' });
    const purger = await openDatabase<unknown>({ url: rdb.purgeUrl, poolSize: 1 });
    const owner = await openDatabase<unknown>({ url: rdb.ownerUrl, poolSize: 1 });
    try {
      // Kept 400 days (the migration step wrote audit.retention): nothing goes, and the purge role changes nothing.
      await refused(sql`DELETE FROM audit_events`, purger.db);
      await refused(sql`UPDATE audit_events SET action = 'nothing'`, purger.db);
      await refused(sql`TRUNCATE audit_events`, purger.db);
      await refused(sql`UPDATE audit_chain SET retention = '1 second'`, purger.db);
      // The owner keeps them a millisecond: the service's round purges them through the purge role.
      await setAuditRetention(owner.db, 1);
      const head = (await h.app.inject({ url: '/api/v1/billing/audit/verify' })).json().head_seq as number;
      await untilOlder(h.db, head, 1);
      const round = await auditRound({ db: h.db, purgeUrl: rdb.purgeUrl, retentionMs: 1, logger });
      await round.run();
      await round.close();
      expect(await h.db.selectFrom('audit_events').select('id').execute()).toEqual([]);
      const check = (await h.app.inject({ url: '/api/v1/billing/audit/verify' })).json();
      expect(check).toMatchObject({ intact: true, events: 0, anchor_seq: head, head_seq: head });
    } finally {
      await purger.close();
      await owner.close();
    }
  });
});
