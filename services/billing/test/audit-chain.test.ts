/**
 * Billing's audit trail is chained by hash (@gpu/common's db/audit-chain.ts): every event carries the previous one's
 * hash; `GET /api/v1/billing/audit/verify` names the first broken link when someone with the database's keys rewrites
 * the trail behind the triggers' back (a field changed, an event deleted from the middle, two swapped, hashes
 * recomputed, the newest deleted); the database itself refuses updates, truncation and deletions but the purge of the
 * oldest events past the retention; and a database made before the chain has its events chained by the migration.
 */
import {
  appendAudit,
  createLogger,
  migrateToLatest,
  purgeAudit,
  setAuditRetention,
  verifyAuditChain,
} from '@gpu/common';
import { asIntruder, untilOlder } from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import type { BillingDB } from '../src/db/schema.ts';
import { unmigratedBilling } from './support/migrations.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

const verify = async () => {
  const res = await h.app.inject({ url: '/api/v1/billing/audit/verify' });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
};

/** Appends an event; its place and ID. */
async function appended(action: string) {
  await appendAudit(h.db, { action });
  return (await seqs()).at(-1)!;
}

const seqs = async () =>
  (await h.db.selectFrom('audit_events').select(['seq', 'id']).orderBy('seq').execute()).map((r) => ({
    seq: Number(r.seq),
    id: r.id,
  }));

describe("billing's audit trail, chained by hash", () => {
  it('names the first broken link of a trail rewritten behind the database triggers', async () => {
    for (let n = 1; n <= 6; n++)
      await appendAudit(h.db, { action: 'withdrawal', target: `wallet:${n}`, details: { n } });
    const events = await seqs();
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await verify()).toMatchObject({ intact: true, events: 6, anchor_seq: 0, head_seq: 6, broken: null });
    const listed = (await h.app.inject({ url: '/api/v1/billing/audit?action=withdrawal' })).json();
    expect(listed.map((e: { seq: number }) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);

    // Each tampering is undone from a copy before the next.
    await asIntruder(h.db, sql`CREATE TABLE audit_copy AS SELECT * FROM audit_events`);
    const restore = () =>
      asIntruder(h.db, sql`DELETE FROM audit_events`, sql`INSERT INTO audit_events SELECT * FROM audit_copy`);
    const broken = async (...statements: ReturnType<typeof sql>[]) => {
      await asIntruder(h.db, ...statements);
      const check = await verify();
      await restore();
      expect((await verify()).intact).toBe(true);
      return check;
    };
    const id = (seq: number) => events[seq - 1]!.id;

    // A field changed.
    expect(await broken(sql`UPDATE audit_events SET details = '{"n": 300}' WHERE seq = 3`)).toMatchObject({
      intact: false,
      broken: { seq: 3, id: id(3), reason: 'altered' },
    });
    // An event deleted from the middle.
    expect(await broken(sql`DELETE FROM audit_events WHERE seq = 4`)).toMatchObject({
      broken: { seq: 5, id: id(5), reason: 'missing' },
    });
    // Two events swapped.
    expect(
      await broken(
        sql`UPDATE audit_events SET seq = -2 WHERE seq = 2`,
        sql`UPDATE audit_events SET seq = 2 WHERE seq = 3`,
        sql`UPDATE audit_events SET seq = 3 WHERE seq = -2`,
      ),
    ).toMatchObject({ broken: { seq: 2, id: id(3), reason: 'link' } });
    // A field changed and its hash recomputed: the next event no longer links to it.
    expect(
      await broken(
        sql`UPDATE audit_events SET details = '{"n": 300}' WHERE seq = 3`,
        sql`UPDATE audit_events SET hash = audit_event_hash(seq, id, at, action, outcome, actor_id, actor_kind,
              actor_credential, address, target, details, request_id, prev_hash) WHERE seq = 3`,
      ),
    ).toMatchObject({ broken: { seq: 4, id: id(4), reason: 'link' } });
    // The newest event deleted.
    expect(await broken(sql`DELETE FROM audit_events WHERE seq = 6`)).toMatchObject({
      broken: { seq: 6, id: null, reason: 'head' },
    });
    // An event forged at the end, past the head.
    expect(
      await broken(
        sql`INSERT INTO audit_events (id, action, outcome, seq, prev_hash, hash)
              SELECT gen_random_uuid(), 'withdrawal', 'succeeded', 7, hash, hash FROM audit_events WHERE seq = 6`,
      ),
    ).toMatchObject({ broken: { seq: 7, reason: 'head' } });
    await asIntruder(h.db, sql`DROP TABLE audit_copy`);

    const renter = await h.issuer.user(['renter']);
    expect((await h.app.inject({ url: '/api/v1/billing/audit/verify', headers: renter.headers })).statusCode).toBe(403);
  });

  it('chains concurrent appends one after another, and an append rolled back leaves no hole', async () => {
    const before = (await verify()).head_seq as number;
    const rolledBack = h.db
      .transaction()
      .execute(async (trx) => {
        await appendAudit<BillingDB>(trx, { action: 'withdrawal', target: 'wallet:rolled-back' });
        throw new Error('the movement failed');
      })
      .catch(() => 'rolled back');
    await Promise.all([
      ...Array.from({ length: 40 }, (_, n) => appendAudit(h.db, { action: 'withdrawal', details: { concurrent: n } })),
      rolledBack,
    ]);
    expect(await rolledBack).toBe('rolled back');
    const check = await verify();
    expect(check).toMatchObject({ intact: true, head_seq: before + 40, broken: null });
    expect((await seqs()).map((e) => e.seq)).toEqual(Array.from({ length: before + 40 }, (_, i) => i + 1));
  });

  it('is refused updates, truncation and young deletions; the purge takes the oldest past the retention', async () => {
    const [first] = await seqs();
    for (const statement of [
      sql`UPDATE audit_events SET action = 'nothing' WHERE seq = ${first!.seq}`,
      sql`DELETE FROM audit_events WHERE seq = ${first!.seq}`,
      sql`TRUNCATE audit_events`,
    ]) {
      await expect(statement.execute(h.db)).rejects.toMatchObject({ code: '42501' });
    }
    // The switch the old guard honoured, which any session could set, opens nothing.
    await expect(
      h.db.transaction().execute(async (trx) => {
        await sql`SELECT set_config('audit.purge', 'on', true)`.execute(trx);
        await sql`DELETE FROM audit_events WHERE seq = ${first!.seq}`.execute(trx);
      }),
    ).rejects.toMatchObject({ code: '42501' });
    // The writer's own figures are not taken: the database sets an event's place, time and hashes.
    await sql`INSERT INTO audit_events (action, outcome, at) VALUES ('forged', 'succeeded', '2001-01-01')`.execute(
      h.db,
    );
    const forged = await h.db
      .selectFrom('audit_events')
      .selectAll()
      .where('action', '=', 'forged')
      .executeTakeFirstOrThrow();
    expect(forged.at.getFullYear()).toBeGreaterThan(2001);
    expect((await verify()).intact).toBe(true);

    const old = await appended('old');
    await untilOlder(h.db, old.seq, 5);
    const young = await appended('young');
    try {
      // Kept a day: no event can go.
      await setAuditRetention(h.db, 86_400_000);
      await expect(sql`DELETE FROM audit_events WHERE seq = ${young.seq}`.execute(h.db)).rejects.toMatchObject({
        code: '42501',
      });
      // Kept a millisecond: past it, but older events are still there: only the start of the chain goes.
      await setAuditRetention(h.db, 1);
      await expect(sql`DELETE FROM audit_events WHERE seq = ${old.seq}`.execute(h.db)).rejects.toMatchObject({
        code: '42501',
      });
      // Kept from between the two on (the database's clock, fixed in a transaction): the purge takes every event up
      // to `old`, from the start, and keeps `young`.
      const purged = await h.db.transaction().execute(async (trx) => {
        await sql`
          UPDATE audit_chain SET retention = now() - (o.at + (y.at - o.at) / 2)
            FROM audit_events o, audit_events y WHERE o.seq = ${old.seq} AND y.seq = ${young.seq}`.execute(trx);
        return purgeAudit(trx);
      });
      expect(purged).toBe(old.seq);
      expect(await seqs()).toEqual([young]);
      expect(await verify()).toMatchObject({ intact: true, events: 1, anchor_seq: old.seq, head_seq: young.seq });
    } finally {
      await setAuditRetention(h.db, 0);
    }
  });
});

describe('a database made before the chain', () => {
  const dbs: { close(): Promise<void> }[] = [];
  afterAll(async () => {
    for (const db of dbs) await db.close();
  });

  it('has the events it held chained by the migration, in the order they were written', async () => {
    const { db, migrator, migrations, close } = await unmigratedBilling();
    dbs.push({ close });
    const before = await migrator.migrateTo('0021-payout-pause');
    expect(before.error).toBeUndefined();
    for (const [action, at] of [
      ['second', '2026-03-02T00:00:00Z'],
      ['first', '2026-03-01T00:00:00Z'],
      ['third', '2026-03-03T00:00:00Z'],
    ]) {
      await sql`INSERT INTO audit_events (action, outcome, at) VALUES (${action}, 'succeeded', ${at})`.execute(db);
    }
    await migrateToLatest(
      db,
      'billing-service',
      migrations,
      createLogger({ service: 't', instanceId: 't', level: 'silent' }),
    );
    const { rows } = await sql<{ seq: number; action: string }>`
      SELECT seq::float8 AS seq, action FROM audit_events ORDER BY seq`.execute(db);
    expect(rows).toEqual([
      { seq: 1, action: 'first' },
      { seq: 2, action: 'second' },
      { seq: 3, action: 'third' },
    ]);
    await sql`INSERT INTO audit_events (action, outcome) VALUES ('fourth', 'succeeded')`.execute(db);
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 4, head_seq: 4 });
  });
});
