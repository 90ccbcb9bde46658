/** Usage updates over real NATS JetStream: a durable consumer, duplicates, redelivery, poison messages. */
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { connectAsDaemon, testEnv } from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUsageConsumer, type UsageRequestLimits } from '../src/adapters/usage-consumer.ts';
import { applyUsageUpdate } from '../src/domain/sessions/usage-updates.ts';
import { H100_X1, manualClock, ownedParties, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });
let publisher: NatsPublisher;
beforeAll(async () => {
  publisher = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'billing-usage-test',
  })) as NatsPublisher;
});
afterAll(async () => {
  await publisher?.close();
});

const records = (sessionId: string) =>
  h.db.selectFrom('usage_records').selectAll().where('session_id', '=', sessionId).orderBy('created_at').execute();

// Polls until `done` holds: a generous deadline costs nothing when it does, and a busy machine can be slow.
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A daemon's report on `session`, dated now by the test's clock. */
const usageReport = (session: string, messageId: string) => ({
  session_id: session,
  timestamp: clock.now().toISOString(),
  gpu_utilization: 50,
  power_draw_w: 200,
  message_id: messageId,
});

/**
 * Billing's usage consumer on a stream of the test's, taking daemons' requests on subjects that name their sender too
 * (`subject_identity`).
 */
const identityConsumer = (prefix: string, suffix: string, reportsPrefix: string, requestLimits?: UsageRequestLimits) =>
  startUsageConsumer({
    ...(requestLimits ? { requestLimits } : {}),
    connection: publisher.connection,
    ctx: h.ctx,
    verifier: h.app.tokenVerifier,
    prefix,
    subjectIdentity: true,
    reportsPrefix,
    logger: createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' }),
    stream: `USAGE_${suffix}`,
    durable: 'billing-usage',
  });

describe('usage over NATS', () => {
  it('applies each message once through a durable consumer, redelivered or not', async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const prefix = `test.usage.${suffix}`;
    const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
    const opts = {
      connection: publisher.connection,
      ctx: h.ctx,
      verifier: h.app.tokenVerifier,
      prefix,
      logger,
      stream: `USAGE_${suffix}`,
      durable: 'billing-usage',
    };
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(3 * 60_000);
    const msg = (messageId: string | undefined, power: number) => ({
      session_id: id,
      timestamp: clock.now().toISOString(),
      gpu_utilization: 50,
      power_draw_w: power,
      ...(messageId ? { message_id: messageId } : {}),
    });

    // A platform service's token on every message.
    const headers = { Authorization: (await h.issuer.client('service')).headers.authorization };
    // Published while no consumer runs: the durable stream keeps them.
    const first = await startUsageConsumer(opts);
    await first.stop();
    await publisher.publish(`${prefix}.${id}`, msg('u-1', 200), { msgId: 'n-1', headers });
    await publisher.publish(`${prefix}.${id}`, msg('u-1', 200), { msgId: 'n-1-resent', headers }); // a retry
    await publisher.publish(`${prefix}.${id}`, { nonsense: true }, { msgId: 'n-bad', headers });
    await publisher.publish(`${prefix}.${crypto.randomUUID()}`, msg('u-x', 1), { msgId: 'n-other', headers });
    // A message whose first delivery was applied but never acknowledged (a crash): redelivered by Nats-Msg-Id.
    clock.advance(60_000);
    await applyUsageUpdate(h.ctx, {
      sender: UNCHECKED_PRINCIPAL,
      sessionId: id,
      messageId: 'n-2',
      timestamp: clock.now(),
      gpuUtilization: 60,
      powerDrawW: 250,
    });
    await publisher.publish(`${prefix}.${id}`, msg(undefined, 250), { msgId: 'n-2', headers });
    await publisher.publish(`${prefix}.${id}`, msg('u-3', 275), { msgId: 'n-3', headers });

    const consumer = await startUsageConsumer(opts);
    try {
      const got = await until(
        () => records(id),
        (r) => r.length >= 3,
      );
      await new Promise((r) => setTimeout(r, 300)); // room for any wrong extra application
      const final = await records(id);
      expect(final.map((r) => r.message_id).sort()).toEqual(['n-2', 'u-1', 'u-3']);
      expect(got.length).toBe(3);
      const s = await h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
      expect(s).toMatchObject({ billed_minutes: 4, total_cost: '0.340000', actual_power_w: '275' });
      // Everything was acknowledged: nothing left pending on the durable consumer.
      const { jetstreamManager } = await import('@nats-io/jetstream');
      const jsm = await jetstreamManager(publisher.connection);
      const info = await until(
        () => jsm.consumers.info(`USAGE_${suffix}`, 'billing-usage'),
        (i) => i.num_ack_pending === 0 && i.num_pending === 0,
      );
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_pending).toBe(0);

      // /health reports a consumer that can no longer receive (here: deleted by an operator).
      await expect(consumer.check()).resolves.toBeUndefined();
      await jsm.consumers.delete(`USAGE_${suffix}`, 'billing-usage');
      const health = await until(
        () =>
          consumer.check().then(
            () => 'up',
            (err: Error) => err.message,
          ),
        (v) => v !== 'up',
      );
      expect(health).toMatch(/^usage consumer: consumer (deleted|not found)/);
      await jsm.streams.delete(`USAGE_${suffix}`);
    } finally {
      await consumer.stop();
    }
  });

  it('gives an existing durable consumer a changed ack wait (what a dead instance delays its messages by)', async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const opts = {
      connection: publisher.connection,
      ctx: h.ctx,
      verifier: h.app.tokenVerifier,
      prefix: `test.usage.${suffix}`,
      logger: createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' }),
      stream: `USAGE_${suffix}`,
      durable: 'billing-usage',
    };
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const jsm = await jetstreamManager(publisher.connection);
    const ackWait = async () => ((await jsm.consumers.info(opts.stream, opts.durable)).config.ack_wait ?? 0) / 1e6;
    await (await startUsageConsumer(opts)).stop();
    expect(await ackWait()).toBe(30_000);
    await (await startUsageConsumer({ ...opts, ackWaitMs: 2_000 })).stop();
    expect(await ackWait()).toBe(2_000);
    await jsm.streams.delete(opts.stream);
  });

  it("applies only messages signed by the session provider's daemon: others are rejected, counted, never applied", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const prefix = `test.usage.${suffix}`;
    const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const otherDaemon = await h.issuer.client('daemon', crypto.randomUUID());
    const p = await ownedParties(h, '10', renter.id, owner.id);
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(2 * 60_000);
    const msg = (messageId: string) => ({
      session_id: id,
      timestamp: clock.now().toISOString(),
      gpu_utilization: 50,
      power_draw_w: 200,
      message_id: messageId,
    });
    const forged = await h.issuer.sign({ sub: owner.id, roles: ['admin'] }, { forged: true });
    const send = (messageId: string, authorization?: string) =>
      publisher.publish(`${prefix}.${id}`, msg(messageId), {
        msgId: messageId,
        headers: authorization ? { Authorization: authorization } : {},
      });
    const consumer = await startUsageConsumer({
      connection: publisher.connection,
      ctx: h.ctx,
      verifier: h.app.tokenVerifier,
      prefix,
      logger,
      stream: `USAGE_${suffix}`,
      durable: 'billing-usage',
    });
    try {
      await send('anonymous');
      await send('forged', `Bearer ${forged}`);
      await send('garbage', 'Bearer not-a-token');
      await send('other-daemon', otherDaemon.headers.authorization);
      await send('renter', renter.headers.authorization);
      await send('daemon', daemon.headers.authorization);
      const rejected = consumer.metrics[0]!;
      const counts = async () =>
        Object.fromEntries((await rejected.get()).values.map((v) => [String(v.labels.reason), v.value]));
      const seen = await until(counts, (c) => (c.unauthenticated ?? 0) + (c.forbidden ?? 0) >= 5);
      await until(
        () => records(id),
        (r) => r.length >= 1,
      );
      await new Promise((r) => setTimeout(r, 300));
      expect((await records(id)).map((r) => r.message_id)).toEqual(['daemon']);
      expect(seen).toEqual({ unauthenticated: 3, forbidden: 2 });
    } finally {
      await consumer.stop();
    }
    const { jetstreamManager } = await import('@nats-io/jetstream');
    await (await jetstreamManager(publisher.connection)).streams.delete(`USAGE_${suffix}`);
  });

  it("takes requests whose subject names their sender, with no token, from the daemon's own NATS user only", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const reportsPrefix = `test.usage-reports.${suffix}`;
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const stranger = await h.issuer.user(['provider']);
    const strangerDaemon = await h.issuer.client('daemon', stranger.id);
    const p = await ownedParties(h, '10', renter.id, owner.id);
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(2 * 60_000);
    const body = (messageId: string) => JSON.stringify({ reports: [usageReport(id, messageId)] });
    // The NATS user auth issues the daemon: it may publish only on its own owner's and its own client's subjects.
    const own = await connectAsDaemon({ owner: owner.id, client: daemon.id }, { usage: reportsPrefix });
    const consumer = await identityConsumer(`test.usage.${suffix}`, suffix, reportsPrefix);
    try {
      const violations: unknown[] = [];
      void (async () => {
        for await (const s of own.status()) if (s.type === 'error') violations.push(s.error);
      })();
      const refused = (subject: string) =>
        until(
          async () => violations,
          (v) => v.some((e) => (e as { subject?: string }).subject === subject),
        ).then((v) => v.find((e) => (e as { subject?: string }).subject === subject));
      // Its own subject, no token: applied, and answered once applied; again: a duplicate.
      const machine = crypto.randomUUID();
      const mine = `${reportsPrefix}.${owner.id}.${daemon.id}.${machine}`;
      expect((await own.request(mine, body('own'), { timeout: 10_000 })).json()).toEqual({
        results: [{ status: 201 }],
      });
      expect((await records(id)).map((r) => r.message_id)).toEqual(['own']);
      expect((await own.request(mine, body('own'), { timeout: 10_000 })).json()).toEqual({
        results: [{ status: 200 }],
      });
      // Another owner's subject: the server refuses it.
      const theirs = `${reportsPrefix}.${stranger.id}.${strangerDaemon.id}.${machine}`;
      own.publish(theirs, body('theirs'));
      expect(await refused(theirs)).toMatchObject({ name: 'PermissionViolationError', subject: theirs });
      // A platform user may publish anywhere: as another owner's daemon it is refused by the session's rule, and
      // answered nowhere but that daemon's own inbox (its own is not).
      const forged = await publisher.connection.request(theirs, body('stranger'), { timeout: 1_000 }).then(
        () => 'answered',
        (err: Error) => err.name,
      );
      expect(forged).not.toBe('answered');
      const rejected = consumer.metrics[0]!;
      const counts = async () =>
        Object.fromEntries((await rejected.get()).values.map((v) => [String(v.labels.reason), v.value]));
      await until(counts, (c) => (c.forbidden ?? 0) >= 1);
      expect((await records(id)).map((r) => r.message_id)).toEqual(['own']);
      expect(await counts()).toEqual({ forbidden: 1 });
      // No daemon's user may publish into a stream (whose acknowledgement would go wherever it says): not the usage
      // stream's subjects, even for its own session.
      const streamed = `test.usage.${suffix}.${id}`;
      own.publish(streamed, JSON.stringify(usageReport(id, 'streamed')), { reply: `${reportsPrefix}.x` });
      expect(await refused(streamed)).toMatchObject({ name: 'PermissionViolationError', subject: streamed });
    } finally {
      await consumer.stop();
      await own.close().catch(() => {});
    }
    const { jetstreamManager } = await import('@nats-io/jetstream');
    await (await jetstreamManager(publisher.connection)).streams.delete(`USAGE_${suffix}`);
  });

  it("applies several reports in one request on its sender's subject, each alone: a stranger's session refused", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const reportsPrefix = `test.usage-reports.${suffix}`;
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const stranger = await h.issuer.user(['provider']);
    // Two rentals on the owner's machines, one on a stranger's (a renter of its own each).
    const rent = async (ownerId: string): Promise<string> => {
      const renter = await h.issuer.user(['renter']);
      return (await start(h, startBody(await ownedParties(h, '10', renter.id, ownerId), H100_X1))).json().session.id;
    };
    const [first, second] = [await rent(owner.id), await rent(owner.id)];
    const theirs = await rent(stranger.id);
    clock.advance(2 * 60_000);
    const report = usageReport;
    const own = await connectAsDaemon({ owner: owner.id, client: daemon.id }, { usage: reportsPrefix });
    const consumer = await identityConsumer(`test.usage.${suffix}`, suffix, reportsPrefix);
    try {
      const subject = `${reportsPrefix}.${owner.id}.${daemon.id}.${crypto.randomUUID()}`;
      const ask = async (payload: unknown) =>
        (await own.request(subject, JSON.stringify(payload), { timeout: 10_000 })).json<Record<string, unknown>>();
      const answer = await ask({ reports: [report(first, 'a'), report(theirs, 'b'), report(second, 'c')] });
      expect(answer).toEqual({
        results: [
          { status: 201 },
          { status: 403, code: 'NOT_SESSION_PROVIDER', detail: expect.any(String) },
          { status: 201 },
        ],
      });
      expect((await records(first)).map((r) => r.message_id)).toEqual(['a']);
      expect((await records(second)).map((r) => r.message_id)).toEqual(['c']);
      expect(await records(theirs)).toEqual([]);
      // Not a request of reports (one report alone, or none): refused whole, nothing applied.
      for (const malformed of [report(first, 'd'), { reports: [] }]) {
        expect(await ask(malformed)).toMatchObject({ problem: { status: 400, code: 'MALFORMED_USAGE_MESSAGE' } });
      }
      expect((await records(first)).map((r) => r.message_id)).toEqual(['a']);
      const rejected = consumer.metrics[0]!;
      const counts = Object.fromEntries((await rejected.get()).values.map((v) => [String(v.labels.reason), v.value]));
      expect(counts).toEqual({ forbidden: 1, malformed: 2 });
    } finally {
      await consumer.stop();
      await own.close();
    }
    const { jetstreamManager } = await import('@nats-io/jetstream');
    await (await jetstreamManager(publisher.connection)).streams.delete(`USAGE_${suffix}`);
  });

  it("answers a daemon client past its share of the reports in hand 503 at once, and takes another client's", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const reportsPrefix = `test.usage-reports.${suffix}`;
    const owner = await h.issuer.user(['provider']);
    const [daemonA, daemonB] = [await h.issuer.client('daemon', owner.id), await h.issuer.client('daemon', owner.id)];
    const rent = async (): Promise<string> => {
      const renter = await h.issuer.user(['renter']);
      return (await start(h, startBody(await ownedParties(h, '10', renter.id, owner.id), H100_X1))).json().session.id;
    };
    const [held, other] = [await rent(), await rent()];
    clock.advance(2 * 60_000);
    const a = await connectAsDaemon({ owner: owner.id, client: daemonA.id }, { usage: reportsPrefix });
    const b = await connectAsDaemon({ owner: owner.id, client: daemonB.id }, { usage: reportsPrefix });
    // An instance holding at most 8 requests and 64 reports, of them 2 requests and 10 reports from one client.
    const consumer = await identityConsumer(`test.usage.${suffix}`, suffix, reportsPrefix, {
      requests: 8,
      reports: 64,
      perClientRequests: 2,
      perClientReports: 10,
    });
    // `held`'s row locked by another transaction: reports on it stay in hand until it is let go.
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let lockTaken = () => {};
    const locked = new Promise<void>((resolve) => (lockTaken = resolve));
    const holder = h.db.transaction().execute(async (trx) => {
      await sql`SELECT id FROM rental_sessions WHERE id = ${held} FOR UPDATE`.execute(trx);
      lockTaken();
      await released;
    });
    await locked;
    try {
      const machine = crypto.randomUUID();
      const ask = (conn: typeof a, client: string, ids: string[], session = held) =>
        conn
          .request(
            `${reportsPrefix}.${owner.id}.${client}.${machine}`,
            JSON.stringify({ reports: ids.map((id) => usageReport(session, id)) }),
            { timeout: 15_000 },
          )
          .then((m) => m.json<Record<string, unknown>>());
      const overloaded = { problem: { status: 503, code: 'OVERLOADED' } };
      // A's first request, 8 reports, waits in hand; 3 more would pass its 10: refused at once.
      const first = ask(a, daemonA.id, ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8']);
      expect(await ask(a, daemonA.id, ['a9', 'a10', 'a11'])).toMatchObject(overloaded);
      // One more report fits (9 of 10), but a third request does not (2 requests).
      const second = ask(a, daemonA.id, ['a12']);
      expect(await ask(a, daemonA.id, ['a13'])).toMatchObject(overloaded);
      // The instance holds 2 of its 8 requests: another client's is taken, and applied once there is room to.
      const others = ask(b, daemonB.id, ['b1'], other);
      release();
      await holder;
      expect(await others).toEqual({ results: [{ status: 201 }] });
      expect(await first).toEqual({ results: Array.from({ length: 8 }, () => ({ status: 201 })) });
      expect(await second).toEqual({ results: [{ status: 201 }] });
      expect((await records(held)).map((r) => r.message_id).sort()).toEqual(
        ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a12'].sort(),
      );
      const counts = Object.fromEntries(
        (await consumer.metrics[0]!.get()).values.map((v) => [String(v.labels.reason), v.value]),
      );
      expect(counts).toEqual({ overloaded: 2 });
    } finally {
      release();
      await holder.catch(() => {});
      await consumer.stop();
      await Promise.all([a.close(), b.close()]);
    }
    const { jetstreamManager } = await import('@nats-io/jetstream');
    await (await jetstreamManager(publisher.connection)).streams.delete(`USAGE_${suffix}`);
  });

  it('takes no requests on subjects a stream captures (its acknowledgements would go wherever a daemon says)', async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const reportsPrefix = `test.usage-reports.${suffix}`;
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const jsm = await jetstreamManager(publisher.connection);
    await jsm.streams.add({ name: `CAPTURING_${suffix}`, subjects: [`${reportsPrefix}.>`] });
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const own = await connectAsDaemon({ owner: owner.id, client: daemon.id }, { usage: reportsPrefix });
    const consumer = await identityConsumer(`test.usage.${suffix}`, suffix, reportsPrefix);
    try {
      const asked = own.request(`${reportsPrefix}.${owner.id}.${daemon.id}.${crypto.randomUUID()}`, '{}', {
        timeout: 2_000,
      });
      // JetStream acknowledged it on the daemon's inbox (the stream took it); billing did not answer.
      expect((await asked).json()).toMatchObject({ stream: `CAPTURING_${suffix}` });
      // Billing would have refused `{}` as malformed, counted: it never took it.
      await new Promise((r) => setTimeout(r, 500));
      expect(await consumer.metrics[0]!.get()).toMatchObject({ values: [] });
    } finally {
      await consumer.stop();
      await own.close();
      await jsm.streams.delete(`CAPTURING_${suffix}`);
      await jsm.streams.delete(`USAGE_${suffix}`);
    }
  });
});
