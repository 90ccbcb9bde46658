/**
 * Auth's audit trail is chained by hash (@gpu/common's db/audit-chain.ts): `GET /api/v1/auth/audit/verify` names the
 * first broken link when someone with the database's keys rewrites the trail behind the triggers' back (a field
 * changed, an event deleted from the middle, two swapped, the newest deleted), and a database made before the chain
 * has its events chained by the migration.
 */
import {
  appendAudit,
  auditChainHead,
  migrateToLatest,
  openDatabase,
  purgeAudit,
  serviceMigrator,
  setAuditRetention,
  verifyAuditChain,
} from '@gpu/common';
import { asIntruder, createTestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { bearer, registerAndLogin, testConfig, useAuth } from './helpers.ts';

const ADMIN = { email: 'chain-auditor@example.com', password: 'initial admin passphrase' };
const auth = useAuth(testConfig({ admin: ADMIN }));
let admin: Record<string, string>;

beforeAll(async () => {
  await ensureInitialAdmin(auth.ctx);
  const res = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
  admin = bearer(res.json().access_token);
});

const verify = async (headers = admin) => {
  const res = await auth.app.inject({ url: '/api/v1/auth/audit/verify', headers });
  return { status: res.statusCode, check: res.json() };
};

describe("auth's audit trail, chained by hash", () => {
  it('names the first broken link of a trail rewritten behind the database triggers', async () => {
    for (let n = 1; n <= 4; n++) await appendAudit(auth.db, { action: 'roles_changed', details: { n } });
    const rows = await auth.db.selectFrom('audit_events').select(['seq', 'id']).orderBy('seq').execute();
    const events = rows.map((r) => ({ seq: Number(r.seq), id: r.id }));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    const last = events.length;
    expect((await verify()).check).toMatchObject({ intact: true, events: last, head_seq: last, broken: null });

    await asIntruder(auth.db, sql`CREATE TABLE audit_copy AS SELECT * FROM audit_events`);
    const broken = async (...statements: ReturnType<typeof sql>[]) => {
      await asIntruder(auth.db, ...statements);
      const { check } = await verify();
      await asIntruder(auth.db, sql`DELETE FROM audit_events`, sql`INSERT INTO audit_events SELECT * FROM audit_copy`);
      expect((await verify()).check.intact).toBe(true);
      return check;
    };
    const id = (seq: number) => events[seq - 1]!.id;
    expect(await broken(sql`UPDATE audit_events SET details = '{"n": 9}' WHERE seq = ${last - 1}`)).toMatchObject({
      intact: false,
      broken: { seq: last - 1, id: id(last - 1), reason: 'altered' },
    });
    expect(await broken(sql`DELETE FROM audit_events WHERE seq = ${last - 2}`)).toMatchObject({
      broken: { seq: last - 1, id: id(last - 1), reason: 'missing' },
    });
    expect(
      await broken(
        sql`UPDATE audit_events SET seq = -1 WHERE seq = ${last - 1}`,
        sql`UPDATE audit_events SET seq = ${last - 1} WHERE seq = ${last}`,
        sql`UPDATE audit_events SET seq = ${last} WHERE seq = -1`,
      ),
    ).toMatchObject({ broken: { seq: last - 1, id: id(last), reason: 'link' } });
    expect(await broken(sql`DELETE FROM audit_events WHERE seq = ${last}`)).toMatchObject({
      broken: { seq: last, id: null, reason: 'head' },
    });
    await asIntruder(auth.db, sql`DROP TABLE audit_copy`);

    const { tokens } = await registerAndLogin(auth.app);
    expect((await verify(bearer(tokens.access_token))).status).toBe(403);
  });

  it('shows, given a head kept elsewhere, a chain recomputed from an event on or cut back before it', async () => {
    for (let n = 1; n <= 3; n++) await appendAudit(auth.db, { action: 'roles_changed', details: { n } });
    const kept = await auditChainHead(auth.db);
    const against = async (query: string) =>
      (await auth.app.inject({ url: `/api/v1/auth/audit/verify?${query}`, headers: admin })).json();
    const keptQuery = `seq=${kept.seq}&hash=${kept.hash.toUpperCase()}`;
    await appendAudit(auth.db, { action: 'roles_changed', details: { n: 4 } });
    expect(await against(keptQuery)).toMatchObject({ intact: true, known: { seq: kept.seq, found: 'matches' } });

    await asIntruder(
      auth.db,
      sql`CREATE TABLE audit_copy AS SELECT * FROM audit_events`,
      sql`CREATE TABLE chain_copy AS SELECT * FROM audit_chain`,
    );
    const restore = () =>
      asIntruder(
        auth.db,
        sql`DELETE FROM audit_events`,
        sql`INSERT INTO audit_events SELECT * FROM audit_copy`,
        sql`DELETE FROM audit_chain`,
        sql`INSERT INTO audit_chain SELECT * FROM chain_copy`,
      );
    // The owner changes an event before the kept head and recomputes every hash from it on, and the chain's head:
    // consistent with itself, so the check alone finds nothing.
    const from = kept.seq - 1;
    const head = Number((await auditChainHead(auth.db)).seq);
    const recompute = [];
    for (let seq = from; seq <= head; seq++) {
      recompute.push(
        sql`UPDATE audit_events e SET prev_hash = p.hash FROM audit_events p WHERE p.seq = e.seq - 1 AND e.seq = ${seq}`,
        sql`UPDATE audit_events SET hash = audit_event_hash(seq, id, at, action, outcome, actor_id, actor_kind,
              actor_credential, address, target, details, request_id, prev_hash) WHERE seq = ${seq}`,
      );
    }
    await asIntruder(
      auth.db,
      sql`UPDATE audit_events SET details = '{"n": 99}' WHERE seq = ${from}`,
      ...recompute,
      sql`UPDATE audit_chain SET head_hash = (SELECT hash FROM audit_events WHERE seq = ${head})`,
    );
    expect((await verify()).check).toMatchObject({ intact: true, broken: null });
    expect(await against(keptQuery)).toMatchObject({
      intact: false,
      broken: { seq: kept.seq, reason: 'rewritten' },
      known: { seq: kept.seq, hash: kept.hash, found: 'differs' },
    });
    await restore();
    // Cut back before the kept head: the events after `from` deleted, the head set to `from`.
    await asIntruder(
      auth.db,
      sql`DELETE FROM audit_events WHERE seq > ${from}`,
      sql`UPDATE audit_chain SET head_seq = ${from}, head_hash = (SELECT hash FROM audit_events WHERE seq = ${from})`,
    );
    expect((await verify()).check).toMatchObject({ intact: true });
    expect(await against(keptQuery)).toMatchObject({
      intact: false,
      broken: { seq: kept.seq, id: null, reason: 'rewritten' },
      known: { found: 'cut' },
    });
    await restore();
    await asIntruder(auth.db, sql`DROP TABLE audit_copy`, sql`DROP TABLE chain_copy`);
    expect(await against(keptQuery)).toMatchObject({ intact: true, known: { found: 'matches' } });
    // A seq without its hash (or a hash that is not one) is a 400.
    for (const query of [
      `seq=${kept.seq}`,
      `hash=${kept.hash}`,
      `seq=${kept.seq}&hash=xyz`,
      'seq=0&hash=' + '0'.repeat(64),
    ]) {
      const res = await auth.app.inject({ url: `/api/v1/auth/audit/verify?${query}`, headers: admin });
      expect(res.statusCode, query).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
    }
  });

  it('chains the events a database held before the chain, in the order they were written', async () => {
    const test = await createTestDatabase('auth');
    const database = await openDatabase<unknown>({ url: test.url, poolSize: 2 });
    try {
      const db = database.db as Kysely<unknown>;
      const migrator = serviceMigrator(db, 'auth-service', migrations);
      expect((await migrator.migrateTo('20261205000000_audit_trail')).error).toBeUndefined();
      for (const [action, at] of [
        ['later', '2026-05-02T00:00:00Z'],
        ['earlier', '2026-05-01T00:00:00Z'],
      ]) {
        await sql`INSERT INTO audit_events (action, outcome, at) VALUES (${action}, 'succeeded', ${at})`.execute(db);
      }
      await migrateToLatest(db, 'auth-service', migrations);
      const { rows } = await sql<{ seq: number; action: string }>`
        SELECT seq::float8 AS seq, action FROM audit_events ORDER BY seq`.execute(db);
      expect(rows).toEqual([
        { seq: 1, action: 'earlier' },
        { seq: 2, action: 'later' },
      ]);
      expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 2, head_seq: 2 });
    } finally {
      await database.close();
      await test.drop();
    }
  });

  it('compares a kept head that is now the newest purged event with the hash the chain keeps of it', async () => {
    await appendAudit(auth.db, { action: 'roles_changed', details: { n: 'to purge' } });
    const kept = await auditChainHead(auth.db);
    await appendAudit(auth.db, { action: 'roles_changed', details: { n: 'kept' } });
    // Purged up to the kept head (the retention the database holds made the next event's age, as the purge role would).
    const purged = await auth.db.transaction().execute(async (trx) => {
      await sql`UPDATE audit_chain SET retention = now() - e.at FROM audit_events e WHERE e.seq = ${kept.seq + 1}`.execute(
        trx,
      );
      return purgeAudit(trx);
    });
    expect(purged).toBeGreaterThan(0);
    await setAuditRetention(auth.db, 0);
    const against = async (hash: string) =>
      (await auth.app.inject({ url: `/api/v1/auth/audit/verify?seq=${kept.seq}&hash=${hash}`, headers: admin })).json();
    expect(await against(kept.hash)).toMatchObject({
      intact: true,
      anchor_seq: kept.seq,
      known: { found: 'matches' },
    });
    expect(await against('ab'.repeat(32))).toMatchObject({
      intact: false,
      broken: { seq: kept.seq, reason: 'rewritten' },
      known: { found: 'differs' },
    });
  });
});
