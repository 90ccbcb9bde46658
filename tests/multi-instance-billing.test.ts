/**
 * Several billing instances, proven with real processes: two instances (the service's own server entry) on one
 * PostgreSQL and one NATS, each running the biller every 250 ms and pulling usage updates from one durable JetStream
 * consumer; the test client spreads the daemons' usage reports over both instances and over NATS. Checked in
 * billing's own data (its API, its usage records, billing records, outbox events and ledger):
 * - usage reports apply exactly once: the same report (one message ID) sent to both instances at once and twice
 *   over NATS makes one usage record, every answer names that record, reports never charge a minute twice, and
 *   one instance SIGKILLed mid-load and restarted loses nothing it answered 2xx or JetStream stored (what the killed
 *   instance held is delivered again after `messaging.usage_ack_wait`); requests in flight on the survivor finish;
 * - the biller, run by both instances every tick, bills each silent session its elapsed minutes exactly, tops its
 *   hold up once, and moves a session that runs out of funds into grace and then to termination once;
 * - in a rolling restart (SIGTERM one instance at a time) every report an instance accepted is answered and applied,
 *   and one it refused (503 while closing, or no connection) is not;
 * - afterwards every session is charged exactly its minutes, once (expectChargedOnce), and the ledger balances.
 * The processes bill by the real clock: the test moves sessions' start into the past to let minutes pass.
 */
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectPublisher, type Database, type NatsPublisher, openDatabase } from '@gpu/common';
import {
  type Caller,
  createTestDatabase,
  freePort,
  type ServerProcess,
  startTestIssuer,
  type TestDatabase,
  type TestIssuer,
  testEnv,
} from '@gpu/common/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BillingDB } from '../services/billing/src/db/schema.ts';
import { Dec } from '../services/billing/src/domain/ledger/money.ts';
import { costOfMinutes } from '../services/billing/src/domain/pricing/pricing.ts';
import {
  createProvider,
  createRenter,
  endAll,
  eventually,
  expectChargedOnce,
  H100_RATE,
  lockSessions,
  type Provider,
  type Session,
  sessionEvents,
  startSession,
  TimeMachine,
} from './support/billing-fleet.ts';
import { Instance } from './support/instance.ts';
import { type Attempt, accepted, type NatsSend, type Spread, UsageLoad } from './support/usage-load.ts';

/** How long ago a request unanswered by an instance was sent for the test to count it as received there. */
const RECEIVED_AFTER_MS = 1_000;

const billingDir = fileURLToPath(new URL('../services/billing', import.meta.url));
const MINUTE = 60_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let issuer: TestIssuer;
let admin: Caller;
let testDb: TestDatabase;
let database: Database<BillingDB>;
let nats: NatsPublisher;
let a: Instance;
let b: Instance;
const providers: Provider[] = [];
const suffix = randomBytes(4).toString('hex');
const usagePrefix = `test.${suffix}.billing.usage`;
const usageStream = `TEST_MULTI_BILLING_USAGE_${suffix}`;
const eventsStream = `TEST_MULTI_BILLING_EVENTS_${suffix}`;

beforeAll(async () => {
  issuer = await startTestIssuer();
  admin = await issuer.user(['admin']);
  testDb = await createTestDatabase('multi_billing');
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    DATABASE_URL: testDb.url,
    NATS_URL: testEnv.natsUrl,
    NATS_CREDENTIALS: testEnv.natsCredentials,
    AUTH_JWKS_URL: issuer.jwksUrl,
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    BILLING__MESSAGING__STREAM: eventsStream,
    BILLING__MESSAGING__SUBJECTS__EVENTS: `test.${suffix}.billing.events`,
    BILLING__MESSAGING__SUBJECTS__USAGE: usagePrefix,
    BILLING__MESSAGING__SUBJECTS__PROVIDER_STATUS: `test.${suffix}.registry.providers.status`,
    BILLING__MESSAGING__PROVIDER_STATUS_CONSUMER: `billing-provider-status-${suffix}`,
    BILLING__MESSAGING__USAGE_STREAM: usageStream,
    BILLING__MESSAGING__USAGE_ACK_WAIT: '2s',
    BILLING__BILLING__BILLING_INTERVAL: '250ms',
    BILLING__BILLING__GRACE_PERIOD: '3s',
    BILLING__BILLING__RECONCILE_INTERVAL: '0s',
    // No chain: deposits are not what this is about (wallets are funded in the database).
    BILLING__BLOCKCHAIN__LOCALNET_FILE: join(tmpdir(), `no-localnet-${suffix}.json`),
  };
  a = new Instance('a', await freePort(), { ...env, INSTANCE_ID: 'billing-a' }, billingDir);
  b = new Instance('b', await freePort(), { ...env, INSTANCE_ID: 'billing-b' }, billingDir);
  // Both at once on an empty database: one migrates it under the migration lock, the other waits and finds it done.
  await Promise.all([a.start(), b.start()]);
  database = await openDatabase<BillingDB>({ url: testDb.url, poolSize: 4, connectTimeoutMs: 2000 });
  nats = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'multi-billing-test',
    stream: { name: usageStream, subjects: [`${usagePrefix}.>`] },
  })) as NatsPublisher;
  for (let i = 0; i < 4; i++) providers.push(await createProvider(database.db, issuer));
}, 120_000);

afterAll(async () => {
  await Promise.all([a, b].map((i) => i?.kill('SIGTERM')));
  if (nats) {
    const jsm = await jetstreamManager(nats.connection);
    for (const s of [usageStream, eventsStream]) await jsm.streams.delete(s).catch(() => {});
    await nats.close();
  }
  await database?.close();
  await testDb?.drop();
  await issuer?.close();
});

/** Daemons publish usage on `<prefix>.<session_id>` with their token, as tools/provider-daemon does. */
const natsSend: NatsSend = (sessionId, body, msgId, daemon) =>
  nats.publish(`${usagePrefix}.${sessionId}`, body, {
    msgId,
    headers: { Authorization: daemon.headers.authorization },
  });

/** `n` sessions of renters holding `funds` each, on the four providers, started through both instances. */
async function newSessions(n: number, funds: string): Promise<Session[]> {
  const sessions: Session[] = [];
  for (let i = 0; i < n; i++) {
    const renter = await createRenter(database.db, issuer, funds);
    sessions.push(await startSession(i % 2 ? b : a, renter, providers[i % providers.length]!));
  }
  return sessions;
}

function load(sessions: Session[], spread: Spread, tag: string) {
  return new UsageLoad(
    sessions.map((s) => ({ id: s.id, daemon: s.provider.daemon })),
    [a, b],
    natsSend,
    spread,
    tag,
  );
}

const key = (sessionId: string, messageId: string) => `${sessionId}\n${messageId}`;

async function usageRecords(sessions: Session[]) {
  return database.db
    .selectFrom('usage_records')
    .select(['id', 'session_id', 'message_id', 'cost'])
    .where(
      'session_id',
      'in',
      sessions.map((s) => s.id),
    )
    .execute();
}

/** The accepted attempts whose report has no usage record (yet). */
async function notApplied(sessions: Session[], attempts: Attempt[]): Promise<string[]> {
  const stored = new Set((await usageRecords(sessions)).map((r) => key(r.session_id, r.message_id)));
  return attempts.filter((x) => accepted(x) && !stored.has(key(x.sessionId, x.messageId))).map((x) => x.messageId);
}

/**
 * Each report is stored once: one usage record per message ID, for reports that were sent; every accepted one
 * stored; every 2xx answer names that one record and at most one answer says it applied it (201); and the costs
 * the records say they billed add up to no more than the session's billed cost (no minute charged twice).
 */
async function expectAppliedOnce(sessions: Session[], attempts: Attempt[]) {
  const rows = await usageRecords(sessions);
  const byKey = new Map(rows.map((r) => [key(r.session_id, r.message_id), r]));
  expect(byKey.size).toBe(rows.length);
  const sent = new Set(attempts.map((x) => key(x.sessionId, x.messageId)));
  expect(rows.filter((r) => !sent.has(key(r.session_id, r.message_id)))).toEqual([]);
  expect(await notApplied(sessions, attempts)).toEqual([]);
  const wrongRecord = attempts.filter(
    (x) => x.via !== 'nats' && accepted(x) && x.usageId !== byKey.get(key(x.sessionId, x.messageId))?.id,
  );
  expect(wrongRecord).toEqual([]);
  const applied = new Map<string, number>();
  for (const x of attempts.filter((y) => y.status === 201)) {
    const k = key(x.sessionId, x.messageId);
    applied.set(k, (applied.get(k) ?? 0) + 1);
  }
  expect([...applied.values()].filter((n) => n > 1)).toEqual([]);
  for (const s of sessions) {
    const row = await database.db
      .selectFrom('rental_sessions')
      .select('total_cost')
      .where('id', '=', s.id)
      .executeTakeFirstOrThrow();
    const charged = rows.filter((r) => r.session_id === s.id).reduce((sum, r) => sum.plus(r.cost), new Dec(0));
    expect(charged.lte(row.total_cost), `${s.id}: reports charged ${charged}, session ${row.total_cost}`).toBe(true);
  }
}

/** Everything JetStream stored has been handed out and acknowledged. */
async function expectConsumerDrained() {
  const jsm = await jetstreamManager(nats.connection);
  const pending = await eventually(async () => {
    const info = await jsm.consumers.info(usageStream, 'billing-usage');
    return info.num_pending + info.num_ack_pending > 0 ? [info.num_pending, info.num_ack_pending] : [];
  });
  expect(pending).toEqual([]);
}

describe('two billing instances on one PostgreSQL and one NATS', () => {
  it('applies every usage report once, over HTTP to both and over NATS, when one is SIGKILLed mid-load', {
    timeout: 120_000,
  }, async () => {
    // Both instances pull from the one durable consumer.
    const jsm = await jetstreamManager(nats.connection);
    const waiting = await eventually(async () => {
      const n = (await jsm.consumers.info(usageStream, 'billing-usage')).num_waiting;
      return n >= 2 ? [] : [n];
    });
    expect(waiting).toEqual([]);

    const sessions = await newSessions(10, '100');
    const clock = new TimeMachine(database.db);
    clock.run(sessions.map((s) => s.id));
    const reports = load(sessions, 'dup', 'kill');
    const http = () => reports.attempts.filter((x) => x.via !== 'nats');
    await sleep(1500);
    // Mid-load: killed while it has reports in flight, after it answered some.
    const deadline = Date.now() + 10_000;
    while (reports.inFlightTo('a').length < 3 && Date.now() < deadline) await sleep(1);
    const inFlightAtKill = reports.inFlightTo('a').length;
    await a.kill('SIGKILL');
    await reports.pause();
    expect(inFlightAtKill).toBeGreaterThanOrEqual(3);
    expect(http().filter((x) => x.via === 'a' && accepted(x)).length).toBeGreaterThan(0);
    // Every request to the survivor was answered 2xx, those in flight at the kill included.
    expect(http().filter((x) => x.via === 'b' && !accepted(x))).toEqual([]);
    expect(http().filter((x) => x.status !== undefined && !accepted(x))).toEqual([]);
    // What either instance answered 2xx is stored, and both answered a report with the same record.
    expect(await notApplied(sessions, http())).toEqual([]);

    // The survivor carries the load alone while the killed instance starts again, then both share it.
    reports.resume();
    await a.start();
    const restartedAt = Date.now();
    await sleep(1500);
    await reports.stop();
    await clock.stop();
    const afterRestart = http().filter((x) => x.sentAt >= restartedAt);
    expect(afterRestart.filter((x) => !accepted(x))).toEqual([]);
    expect(afterRestart.filter((x) => x.via === 'a').length).toBeGreaterThan(0);
    expect(afterRestart.filter((x) => x.via === 'b').length).toBeGreaterThan(0);
    // What JetStream stored is applied too, the messages the killed instance held (redelivered) included.
    expect(await eventually(() => notApplied(sessions, reports.attempts))).toEqual([]);
    await expectConsumerDrained();
    await expectAppliedOnce(sessions, reports.attempts);

    await endAll([a, b], sessions);
    await expectChargedOnce(database.db, b, admin, sessions);
  });

  it('bills each silent session exactly its minutes with both instances billing, and ends a broke one once', {
    timeout: 120_000,
  }, async () => {
    const rich = await newSessions(6, '100');
    // 5.10 held for the first hour and 0.30 more: 63 full minutes, then grace, then termination.
    const broke = await newSessions(4, '5.40');
    const clock = new TimeMachine(database.db);
    const richIds = rich.map((s) => s.id);
    const brokeIds = broke.map((s) => s.id);
    const rate = new Dec(H100_RATE);
    // No usage report arrives (silent daemons): only the two billers bill.
    await clock.shift(brokeIds, 70);
    for (let step = 1; step <= 4; step++) {
      await clock.shift(richIds, 20);
      // Every session is billed its full elapsed minutes; the hold stays ahead of the cost by 10 to 60 minutes:
      // topped up once when it ran low (twice would hold more than 60 minutes ahead).
      const wrong = await eventually(async () => {
        const rows = await database.db
          .selectFrom('rental_sessions as s')
          .innerJoin('holds as h', 'h.id', 's.hold_id')
          .select(['s.id', 's.started_at', 's.billed_minutes', 's.total_cost', 'h.amount', 'h.posted', 'h.released'])
          .where('s.id', 'in', richIds)
          .execute();
        return rows.flatMap((r) => {
          const minutes = Math.floor((Date.now() - new Date(r.started_at).getTime()) / MINUTE);
          const cost = costOfMinutes(rate, minutes, 6);
          const held = new Dec(r.amount).minus(r.posted).minus(r.released);
          const ok =
            r.billed_minutes === minutes &&
            new Dec(r.total_cost).eq(cost) &&
            held.gte(cost.plus(costOfMinutes(rate, 10, 6))) &&
            held.lte(cost.plus(costOfMinutes(rate, 60, 6)));
          return ok ? [] : [`${r.id} step ${step}: ${r.billed_minutes}/${minutes} min, ${r.total_cost}, holds ${held}`];
        });
      });
      expect(wrong).toEqual([]);
    }
    // The broke sessions: into grace once, terminated once, at the minutes their funds cover.
    const notEnded = await eventually(async () => {
      const rows = await database.db
        .selectFrom('rental_sessions')
        .select(['id', 'status'])
        .where('id', 'in', brokeIds)
        .execute();
      return rows.filter((r) => r.status !== 'terminated');
    });
    expect(notEnded).toEqual([]);
    await sleep(1000); // a few more ticks of both billers: nothing more happens to them
    const events = await sessionEvents(database.db, [...richIds, ...brokeIds]);
    // Each broke session was warned of its low balance before (or as) its grace began: events of one transaction
    // share their time, so their order is the kinds'.
    for (const id of brokeIds) {
      expect(events.get(id)?.sort(), id).toEqual([
        'session.grace_period',
        'session.low_balance',
        'session.started',
        'session.terminated',
      ]);
    }
    for (const id of richIds) expect(events.get(id), id).toEqual(['session.started']);

    await endAll([a, b], rich);
    const brokeSet = new Set(brokeIds);
    await expectChargedOnce(database.db, a, admin, [...rich, ...broke], (s) =>
      brokeSet.has(s.id) ? { minutes: 63 } : undefined,
    );
  });

  it('loses no accepted report in a rolling restart under load (SIGTERM one instance at a time)', {
    timeout: 120_000,
  }, async () => {
    const sessions = await newSessions(8, '100');
    const ids = sessions.map((s) => s.id);
    const clock = new TimeMachine(database.db);
    clock.run(ids);
    const reports = load(sessions, 'one', 'roll');
    const http = () => reports.attempts.filter((x) => x.via !== 'nats');
    for (const instance of [a, b]) {
      const roundStart = Date.now();
      await sleep(700);
      // Signalled while it works on requests: the sessions' rows are locked, so the reports it has wait inside it
      // (in the database) until after the signal.
      const lockedAt = Date.now();
      const unlock = await lockSessions(database.db, ids);
      // The workers' reports go round robin and may all be waiting at the other instance: one more to this one
      // makes sure it has a report in hand when signalled.
      const extra = reports.sendTo(instance, { id: sessions[0]!.id, daemon: sessions[0]!.provider.daemon });
      // Only those sent a second or more before count as received: a request just sent may not have reached the
      // instance yet (on a busy machine it may wait that long for a core to accept or read it).
      const deadline = Date.now() + 15_000;
      while (reports.inFlightTo(instance.name, RECEIVED_AFTER_MS).length < 1 && Date.now() < deadline) await sleep(5);
      const inFlight = reports.inFlightTo(instance.name, RECEIVED_AFTER_MS);
      // The client keeps sending to it until it refuses (as a load balancer that learns late).
      const signalledAt = Date.now();
      instance.proc?.child.kill('SIGTERM');
      await sleep(200);
      await unlock();
      const { code } = await (instance.proc as ServerProcess).exited;
      expect(code).toBe(0);
      await extra;
      await reports.pause();
      // What it was sent before the signal, it answered; after it, it refused (503 while closing, or no
      // connection). "Before" allows the time a request takes to reach it: on a busy host, as long as its slowest
      // answer of this round took before the sessions were locked (answers after that, and those of the round before
      // this one, waited for a lock on purpose).
      const sent = http().filter((x) => x.via === instance.name);
      const reach = Math.max(
        RECEIVED_AFTER_MS,
        ...sent
          .filter((x) => x.sentAt >= roundStart && accepted(x) && (x.settledAt ?? lockedAt) < lockedAt)
          .map((x) => x.settledAt! - x.sentAt),
      );
      expect(
        sent.filter((x) => x.sentAt < signalledAt - reach && !accepted(x)).map((x) => x.status),
        `answers took up to ${reach} ms`,
      ).toEqual([]);
      expect(inFlight.length).toBeGreaterThan(0);
      expect(inFlight.filter((x) => !accepted(x)).map((x) => x.status)).toEqual([]);
      for (const x of sent) expect([200, 201, 503, undefined]).toContain(x.status);
      // Everything answered 2xx is stored; nothing refused is.
      expect(await notApplied(sessions, http())).toEqual([]);
      const stored = new Set((await usageRecords(sessions)).map((r) => key(r.session_id, r.message_id)));
      expect(http().filter((x) => !accepted(x) && stored.has(key(x.sessionId, x.messageId)))).toEqual([]);
      reports.resume();
      await instance.start();
    }
    await sleep(500);
    await reports.stop();
    await clock.stop();
    // The survivor of each step answered everything.
    expect(http().filter((x) => x.status !== undefined && x.status !== 503 && !accepted(x))).toEqual([]);
    expect(await eventually(() => notApplied(sessions, reports.attempts))).toEqual([]);
    await expectConsumerDrained();
    await expectAppliedOnce(sessions, reports.attempts);

    await endAll([a, b], sessions);
    await expectChargedOnce(database.db, a, admin, sessions);
  });
});
