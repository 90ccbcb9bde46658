/**
 * Every timestamp billing takes from a caller is bounded: a usage report's `timestamp` (single, batch, NATS) and the
 * `from`/`to` of the wallet history and the billing history. Out of the accepted range (1970 to 2100, as common's
 * `zTimestamp`) is a 400 naming the field (never PostgreSQL's "date/time field value out of range" as a 500); a
 * usage report dated further in the future than `billing.max_clock_skew`, or before its session started, is refused
 * (400 USAGE_TIMESTAMP_OUT_OF_RANGE; over NATS terminated) and never becomes the session's last usage time. Nothing is
 * written for a refused report, and the ledger stays balanced.
 */
import { connectPublisher, createLogger, type NatsPublisher } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { startUsageConsumer } from '../src/adapters/usage-consumer.ts';
import { H100_X1, manualClock, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const YEAR_0 = '0000-01-01T00:00:00Z';
const YEAR_9999 = '9999-12-31T23:59:59Z';
const MINUTE = 60_000;
/** Dated this far from the billing clock: the default skew allowed is 5 minutes. */
const at = (offsetMs: number) => new Date(clock.now().getTime() + offsetMs).toISOString();

const report = (sessionId: string, timestamp: string, messageId: string = crypto.randomUUID(), power = 200) => ({
  session_id: sessionId,
  message_id: messageId,
  timestamp,
  gpu_utilization: 50,
  power_draw_w: power,
});
const post = (url: string, payload: object) => h.app.inject({ method: 'POST', url, payload });
const get = (url: string) => h.app.inject({ method: 'GET', url });

/** A running session, started on the billing clock, two minutes ago, with one report (power 200) applied. */
async function runningSession() {
  const p = await parties(h, '20');
  const started = await start(h, startBody(p, H100_X1));
  expect(started.statusCode, started.body).toBe(201);
  const id = started.json().session.id as string;
  clock.advance(2 * MINUTE);
  const first = await post('/api/v1/billing/usage-update', report(id, at(0), 'first'));
  expect(first.statusCode, first.body).toBe(201);
  return { id, p, startedAt: started.json().session.started_at as string };
}

/** The session's usage records and the fields a report changes, to compare before and after a refusal. */
async function stateOf(id: string) {
  const session = await h.db
    .selectFrom('rental_sessions')
    .select(['last_usage_at', 'actual_power_w', 'billed_minutes', 'total_cost'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  const records = await h.db.selectFrom('usage_records').select('message_id').where('session_id', '=', id).execute();
  return { session, records: records.map((r) => r.message_id).sort() };
}

describe('usage report timestamps', () => {
  it('refuses year 0 and year 9999 with a 400 naming body.timestamp, single and in a batch, writing nothing', async () => {
    const s = await runningSession();
    const before = await stateOf(s.id);
    for (const timestamp of [YEAR_0, YEAR_9999, '2100-01-01T00:00:00Z', '1969-12-31T23:59:59Z']) {
      const single = await post('/api/v1/billing/usage-update', report(s.id, timestamp));
      expect(single.statusCode, `${timestamp}: ${single.body}`).toBe(400);
      expect(single.headers['content-type']).toContain('application/problem+json');
      expect(single.json().code).toBe('VALIDATION_ERROR');
      expect(single.json().errors.map((e: { path: string }) => e.path)).toEqual(['body.timestamp']);
      // In a batch, like any malformed report: the whole request is a 400 and no report of it is applied.
      const batch = await post('/api/v1/billing/usage-updates', {
        reports: [report(s.id, at(0), 'good-1', 300), report(s.id, timestamp), report(s.id, at(0), 'good-2', 300)],
      });
      expect(batch.statusCode, `${timestamp}: ${batch.body}`).toBe(400);
      expect(batch.json().errors.map((e: { path: string }) => e.path)).toEqual(['body.reports.1.timestamp']);
    }
    expect(await stateOf(s.id)).toEqual(before);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuses a report dated beyond the allowed clock skew in the future or before the session started', async () => {
    const s = await runningSession();
    const before = await stateOf(s.id);
    const cases: [string, string][] = [
      [at(6 * MINUTE), 'future'],
      [at(365 * 24 * 60 * MINUTE), 'future'],
      [new Date(Date.parse(s.startedAt) - 6 * MINUTE).toISOString(), 'before_start'],
      ['2001-01-01T00:00:00Z', 'before_start'],
    ];
    for (const [timestamp, reason] of cases) {
      const res = await post('/api/v1/billing/usage-update', report(s.id, timestamp));
      expect(res.statusCode, `${timestamp}: ${res.body}`).toBe(400);
      expect(res.json(), timestamp).toMatchObject({ code: 'USAGE_TIMESTAMP_OUT_OF_RANGE', reason });
      expect(res.json().errors[0].path).toBe('body.timestamp');
      expect(Date.parse(res.json().latest)).toBe(clock.now().getTime() + 5 * MINUTE);
    }
    expect(await stateOf(s.id)).toEqual(before);

    // Within the skew either way: applied, and the newest report (by timestamp) still sets the power.
    const ahead = await post('/api/v1/billing/usage-update', report(s.id, at(4 * MINUTE), 'ahead', 310));
    expect(ahead.statusCode, ahead.body).toBe(201);
    const early = new Date(Date.parse(s.startedAt) - 4 * MINUTE).toISOString();
    expect((await post('/api/v1/billing/usage-update', report(s.id, early, 'early', 120))).statusCode).toBe(201);
    clock.advance(5 * MINUTE);
    const later = await post('/api/v1/billing/usage-update', report(s.id, at(0), 'later', 330));
    expect(later.json().session).toMatchObject({ actual_power_w: '330', last_usage_at: at(0) });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('answers a far-future report in a batch on its own (400 in its result); the other reports are applied', async () => {
    const s = await runningSession();
    const res = await post('/api/v1/billing/usage-updates', {
      reports: [report(s.id, at(0), 'b-1', 250), report(s.id, at(60 * MINUTE), 'b-2', 999), report(s.id, at(0), 'b-3')],
    });
    expect(res.statusCode, res.body).toBe(200);
    const results = res.json().results;
    expect(results.map((r: { status: number }) => r.status)).toEqual([201, 400, 201]);
    expect(results[1].problem).toMatchObject({ code: 'USAGE_TIMESTAMP_OUT_OF_RANGE', reason: 'future', status: 400 });
    const after = await stateOf(s.id);
    expect(after.records).toEqual(['b-1', 'b-3', 'first']);
    expect(after.session.actual_power_w).not.toBe('999');
    expect(new Date(after.session.last_usage_at!).getTime()).toBeLessThanOrEqual(clock.now().getTime());
  });

  it('terminates NATS reports dated year 0, year 9999 or beyond the skew, applying none of them', async () => {
    const s = await runningSession();
    const before = await stateOf(s.id);
    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'usage-ts-test',
    })) as NatsPublisher;
    const suffix = crypto.randomUUID().slice(0, 8);
    const prefix = `test.usage.${suffix}`;
    const consumer = await startUsageConsumer({
      connection: publisher.connection,
      ctx: h.ctx,
      verifier: h.app.tokenVerifier,
      prefix,
      logger: createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' }),
      stream: `USAGE_${suffix}`,
      durable: 'billing-usage',
    });
    try {
      const headers = { Authorization: (await h.issuer.client('service')).headers.authorization };
      const subject = `${prefix}.${s.id}`;
      await publisher.publish(subject, report(s.id, YEAR_0, 'n-0'), { msgId: 'n-0', headers });
      await publisher.publish(subject, report(s.id, YEAR_9999, 'n-9999'), { msgId: 'n-9999', headers });
      await publisher.publish(subject, report(s.id, at(60 * MINUTE), 'n-future'), { msgId: 'n-future', headers });
      await publisher.publish(subject, report(s.id, at(0), 'n-ok', 260), { msgId: 'n-ok', headers });
      const rejected = async () => {
        const values = (await consumer.metrics[0]!.get()).values;
        return Object.fromEntries(values.map((v) => [v.labels.reason, v.value]));
      };
      // Up to 20 s (it stops once settled): a busy machine can be slow to deliver and apply them.
      const deadline = Date.now() + 20_000;
      const settled = async () => {
        const r = await rejected();
        return (await stateOf(s.id)).records.length >= 2 && (r.malformed ?? 0) + (r.refused ?? 0) >= 3;
      };
      while (Date.now() < deadline && !(await settled())) {
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(await rejected()).toEqual({ malformed: 2, refused: 1 });
      const after = await stateOf(s.id);
      expect(after.records).toEqual([...before.records, 'n-ok'].sort());
      expect(after.session.actual_power_w).toBe('260');
      const { jetstreamManager } = await import('@nats-io/jetstream');
      const jsm = await jetstreamManager(publisher.connection);
      expect((await jsm.consumers.info(`USAGE_${suffix}`, 'billing-usage')).num_ack_pending).toBe(0);
      await jsm.streams.delete(`USAGE_${suffix}`);
    } finally {
      await consumer.stop();
      await publisher.close();
    }
  });
});

describe('query ranges', () => {
  let walletId: string;
  beforeAll(async () => {
    walletId = (await h.fundedWallet('5')).id;
  });

  const lists = () => [`/api/v1/wallet/${walletId}/transactions`, '/api/v1/billing/history'];

  it('answers from/to in year 0 or 9999 with a 400 naming the parameter', async () => {
    for (const list of lists()) {
      for (const name of ['from', 'to']) {
        for (const value of [YEAR_0, YEAR_9999, '0001-01-01T00:00:00-23:59']) {
          const res = await get(`${list}?${name}=${encodeURIComponent(value)}`);
          expect(res.statusCode, `${list} ${name}=${value}: ${res.body}`).toBe(400);
          expect(res.headers['content-type']).toContain('application/problem+json');
          expect(res.json().errors.map((e: { path: string }) => e.path)).toEqual([`querystring.${name}`]);
        }
      }
      // The edges of the range are fine.
      const ok = await get(`${list}?from=1970-01-01T00:00:00Z&to=2099-12-31T23:59:59.999Z`);
      expect(ok.statusCode, ok.body).toBe(200);
    }
  });
});
