/**
 * Auth as a production set-up runs it (@gpu/common's db/roles.ts): migrated as the schema's owner
 * (`database.migration_url`), then serving as a role that owns nothing: everything auth does works, and its audit
 * trail can only be appended to and read. Against real PostgreSQL roles.
 */
import { auditTrailExposure, durationMs, migrateServiceDatabase, openDatabase } from '@gpu/common';
import { createRoleDatabase, type RoleDatabase } from '@gpu/common/testing';
import { type QueryExecutorProvider, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import type { AuthDatabase } from '../src/db/schema.ts';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { bearer, registerAndLogin, startAuth, type TestAuth, testConfig } from './helpers.ts';

const ADMIN = { email: 'role-auditor@example.com', password: 'initial admin passphrase' };
let rdb: RoleDatabase;
let auth: TestAuth;
let close: () => Promise<void>;

beforeAll(async () => {
  rdb = await createRoleDatabase('auth');
  const config = testConfig({
    admin: ADMIN,
    database: { url: rdb.runtimeUrl, migration_url: rdb.ownerUrl },
    audit: { purge_url: rdb.purgeUrl },
  });
  const database = await openDatabase<AuthDatabase>({ url: rdb.runtimeUrl, poolSize: 5 });
  await migrateServiceDatabase({
    database,
    section: config.database,
    service: 'auth-service',
    migrations,
    audit: { retentionMs: durationMs(config.audit.retention), purgeUrl: config.audit.purge_url },
  });
  auth = await startAuth(database.db, config);
  close = async () => {
    await auth.close();
    await database.close();
  };
});
afterAll(async () => {
  await close?.();
  await rdb?.drop();
});

const refused = (statement: ReturnType<typeof sql>, db: QueryExecutorProvider = auth.db) =>
  expect(statement.execute(db)).rejects.toMatchObject({ code: '42501' });

describe('auth under its own database role', () => {
  it('registers, signs in, makes keys and audits them, as a role that owns nothing', async () => {
    expect(await auditTrailExposure(auth.db)).toBeNull();
    await ensureInitialAdmin(auth.ctx);
    const login = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
    expect(login.statusCode, login.body).toBe(200);
    const admin = bearer(login.json().access_token);
    const { tokens } = await registerAndLogin(auth.app);
    const key = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: bearer(tokens.access_token),
      payload: { name: 'ci', scopes: ['offers'] },
    });
    expect(key.statusCode, key.body).toBe(201);
    const trail = (await auth.app.inject({ url: '/api/v1/auth/audit?action=api_key_created', headers: admin })).json();
    expect(trail).toHaveLength(1);
    const check = (await auth.app.inject({ url: '/api/v1/auth/audit/verify', headers: admin })).json();
    expect(check).toMatchObject({ intact: true, broken: null });
    expect(check.events).toBeGreaterThan(0);
  });

  it('cannot rewrite its trail: no update, deletion, truncation, trigger switched off or chain head moved', async () => {
    for (const statement of [
      sql`UPDATE audit_events SET action = 'nothing'`,
      sql`DELETE FROM audit_events`,
      sql`TRUNCATE audit_events`,
      sql`ALTER TABLE audit_events DISABLE TRIGGER USER`,
      sql`DROP TABLE audit_events`,
      sql`UPDATE audit_chain SET head_seq = 0`,
      sql`SET session_replication_role = replica`,
    ]) {
      await refused(statement);
    }
    const purger = await openDatabase<unknown>({ url: rdb.purgeUrl, poolSize: 1 });
    try {
      // The purge role deletes only what is past the retention (400 days here): nothing.
      await refused(sql`DELETE FROM audit_events`, purger.db);
      await refused(sql`UPDATE audit_events SET action = 'nothing'`, purger.db);
    } finally {
      await purger.close();
    }
  });
});
