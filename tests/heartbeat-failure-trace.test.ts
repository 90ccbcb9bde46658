/**
 * A heartbeat the registry fails over NATS (the database refuses its write: the registry's failure, not a refusal
 * of its sender) is answered 500, counted `failed`, and logged in the trace of its message: the log line names the
 * daemon's trace and the registry's consumer span, which sits under the daemon's span and is marked failed, so an
 * operator reading the line finds the heartbeat in the trace the daemon started. A real registry (its NATS
 * subscriber, group commit and PostgreSQL) in this process; the spans go to the SDK's in-memory exporter.
 */
import { randomUUID } from 'node:crypto';
import { startTracing } from '@gpu/common';
import { captureLogs, testEnv } from '@gpu/common/testing';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { gpu, type Harness, register, startHarness } from '../services/provider-registry/test/helpers.ts';

// Before the app is built, as a service starts it.
const exporter = new InMemorySpanExporter();
const tracing = await startTracing({ service: 'heartbeat-failure-test', exporter });
const logs = captureLogs();
let h: Harness;

beforeAll(async () => {
  h = await startHarness({ takeHeartbeats: true, logDestination: logs.destination });
});
afterAll(async () => {
  await h?.close();
  await h?.testDb.drop();
  await tracing?.shutdown();
});

it('logs a heartbeat the registry failed with its trace: the daemon span, and the failed consumer span under it', async () => {
  const owner = randomUUID();
  const daemon = await h.issuer.client('daemon', owner);
  const machine = await register(h.app, { owner_id: owner, gpus: [gpu()] });
  const subject = `${h.config.messaging.subjects.heartbeats}.${machine.id}`;
  const nc = await connect(testEnv.natsConnectOptions());
  /** A heartbeat sent as the daemon sends it: its token, and the context of a span of its own. */
  const beat = async () => {
    const sent = trace.getTracer('daemon').startSpan('heartbeat');
    const headers = natsHeaders();
    headers.set('Authorization', `Bearer ${daemon.token}`);
    propagation.inject(trace.setSpan(ROOT_CONTEXT, sent), headers, { set: (c, k, v) => c.set(k, v) });
    const answer = await nc.request(subject, '', { headers, timeout: 10_000 });
    sent.end();
    return { sent, answer: answer.json<{ status_code: number; problem?: { code?: string } }>() };
  };
  try {
    // Applied while the database writes: no failure logged.
    expect((await beat()).answer.status_code).toBe(200);
    // From now on the database refuses every write of a machine's clock.
    await sql`CREATE FUNCTION test_refuse_clock() RETURNS trigger LANGUAGE plpgsql
      AS $$ BEGIN RAISE EXCEPTION 'the disk is on fire'; END $$`.execute(h.database.db);
    await sql`CREATE TRIGGER test_refuse_clock BEFORE UPDATE ON provider_liveness
      FOR EACH ROW EXECUTE FUNCTION test_refuse_clock()`.execute(h.database.db);
    const { sent, answer } = await beat();
    expect(answer.status_code).toBe(500);

    const failures = logs.lines().filter((l) => l.msg === 'heartbeat failed');
    expect(failures).toHaveLength(1);
    const [line] = failures;
    expect(line).toMatchObject({ level: 'error', subject, trace_id: sent.spanContext().traceId });
    expect(JSON.stringify(line?.err)).toContain('the disk is on fire');
    const consumer = exporter.getFinishedSpans().find((s) => s.spanContext().spanId === line?.span_id);
    expect(consumer?.name).toBe(`process ${subject}`);
    expect(consumer?.spanContext().traceId).toBe(sent.spanContext().traceId);
    expect(consumer?.parentSpanContext?.spanId).toBe(sent.spanContext().spanId);
    expect(consumer?.status.code).toBe(2 /* ERROR */);
    const metrics = (await h.app.inject({ url: '/metrics' })).body;
    expect(metrics).toMatch(/^registry_heartbeat_messages_rejected_total\{[^}]*reason="failed"[^}]*\} 1$/m);
  } finally {
    await sql`DROP TRIGGER IF EXISTS test_refuse_clock ON provider_liveness`.execute(h.database.db);
    await nc.close();
  }
});
