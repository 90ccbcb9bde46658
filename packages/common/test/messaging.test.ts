import { randomBytes } from 'node:crypto';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  awaitStream,
  connectPublisher,
  createLogger,
  type EventPublisher,
  ensureStream,
  NoopPublisher,
  serveRequests,
} from '../src/index.ts';
import { testEnv } from '../src/testing/index.ts';

const suffix = randomBytes(4).toString('hex');
const streamName = `TEST_MSG_${suffix}`;
const subject = `test.${suffix}.status`;
let nc: NatsConnection;
let publisher: EventPublisher;

beforeAll(async () => {
  nc = await connect(testEnv.natsConnectOptions());
  publisher = await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'messaging-test',
    stream: { name: streamName, subjects: [`test.${suffix}.>`] },
  });
});

afterAll(async () => {
  await publisher.close();
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(streamName).catch(() => {});
  await nc.drain();
});

async function readAll(stream: string, count: number) {
  const jsm = await jetstreamManager(nc);
  const name = `c_${randomBytes(4).toString('hex')}`;
  await jsm.consumers.add(stream, { durable_name: name, ack_policy: AckPolicy.Explicit });
  const consumer = await jetstream(nc).consumers.get(stream, name);
  const msgs = await consumer.fetch({ max_messages: count + 5, expires: 1000 });
  const out: { subject: string; data: unknown; msgId?: string; correlationId?: string; contentType?: string }[] = [];
  for await (const m of msgs) {
    out.push({
      subject: m.subject,
      data: m.json(),
      msgId: m.headers?.get('Nats-Msg-Id'),
      correlationId: m.headers?.get('X-Correlation-ID'),
      contentType: m.headers?.get('Content-Type'),
    });
    m.ack();
  }
  return out;
}

describe('NATS publisher (JetStream)', () => {
  it('publishes JSON with Nats-Msg-Id and X-Correlation-ID into the ensured stream', async () => {
    const id = await publisher.publish(subject, { provider_id: 'p-1', status: 'idle' }, { correlationId: 'corr-1' });
    const id2 = await publisher.publish(subject, { provider_id: 'p-2', status: 'busy' });
    expect(id).not.toBe(id2);
    const got = await readAll(streamName, 2);
    expect(got).toHaveLength(2);
    expect(got[0]).toMatchObject({
      subject,
      data: { provider_id: 'p-1', status: 'idle' },
      msgId: id,
      correlationId: 'corr-1',
      contentType: 'application/json',
    });
    expect(got[1]?.msgId).toBe(id2);
    expect(got[1]?.correlationId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('drops a re-published message with the same Nats-Msg-Id (idempotent retry)', async () => {
    const jsm = await jetstreamManager(nc);
    const before = (await jsm.streams.info(streamName)).state.messages;
    await publisher.publish(subject, { n: 1 }, { msgId: `dup-${suffix}` });
    await publisher.publish(subject, { n: 1 }, { msgId: `dup-${suffix}` });
    const after = (await jsm.streams.info(streamName)).state.messages;
    expect(after - before).toBe(1);
  });

  it('ensureStream is idempotent and adds missing subjects to an existing stream', async () => {
    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, { name: streamName, subjects: [`test.${suffix}.>`] });
    await ensureStream(jsm, { name: streamName, subjects: [`other.${suffix}.>`] });
    const info = await jsm.streams.info(streamName);
    expect(info.config.subjects.sort()).toEqual([`other.${suffix}.>`, `test.${suffix}.>`].sort());
  });

  it('names the stream that already captures a subject another stream asks for', async () => {
    const jsm = await jetstreamManager(nc);
    await expect(ensureStream(jsm, { name: `${streamName}_B`, subjects: [`test.${suffix}.status`] })).rejects.toThrow(
      `JetStream stream ${streamName}_B cannot capture test.${suffix}.status: stream ${streamName} already does`,
    );
    await expect(jsm.streams.info(`${streamName}_B`)).rejects.toThrow();
  });

  it("finds another service's stream by subject, whatever its name, waits for it, and never creates it", async () => {
    const jsm = await jetstreamManager(nc);
    const signal = new AbortController().signal;
    expect(await awaitStream(jsm, `test.${suffix}.session.>`, { signal })).toBe(streamName);

    // Not there yet: asked again until its owner makes it.
    const later = `${streamName}_LATER`;
    const waits: number[] = [];
    const found = awaitStream(jsm, `later.${suffix}.x`, { signal, onWait: (n) => waits.push(n) });
    // Made once it has asked and missed (not after a fixed pause, which a busy machine can outlast before asking).
    await expect.poll(() => waits.length, { timeout: 20_000 }).toBeGreaterThan(0);
    expect(await jsm.streams.info(later).catch(() => null)).toBeNull();
    await ensureStream(jsm, { name: later, subjects: [`later.${suffix}.>`] });
    expect(await found).toBe(later);
    expect(waits.length).toBeGreaterThan(0);
    await jsm.streams.delete(later);

    const abort = new AbortController();
    const never = awaitStream(jsm, `never.${suffix}.x`, { signal: abort.signal });
    abort.abort();
    await expect(never).rejects.toThrow(/stopped/);
  });

  it('answers ping while connected and refuses to publish after close', async () => {
    const p = await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      stream: { name: streamName, subjects: [] },
    });
    await expect(p.ping()).resolves.toBeUndefined();
    await p.close();
    await expect(p.ping()).rejects.toThrow(/closed/);
    await expect(p.publish(subject, {})).rejects.toThrow();
  });
});

describe('NATS publisher (core, no stream)', () => {
  it('publishes with headers to plain subscribers', async () => {
    const p = await connectPublisher({ url: testEnv.natsUrl, credentials: testEnv.natsCredentials });
    const sub = nc.subscribe(`core.${suffix}`, { max: 1 });
    await nc.flush();
    const id = await p.publish(`core.${suffix}`, { hello: 'world' }, { correlationId: 'c-9' });
    for await (const m of sub) {
      expect(m.json()).toEqual({ hello: 'world' });
      expect(m.headers?.get('Nats-Msg-Id')).toBe(id);
      expect(m.headers?.get('X-Correlation-ID')).toBe('c-9');
    }
    await p.close();
  });
});

describe('connecting', () => {
  it('gives a no-op publisher when no URL is configured', async () => {
    const p = await connectPublisher({ url: '' });
    expect(p).toBeInstanceOf(NoopPublisher);
    expect(p.enabled).toBe(false);
    await expect(p.publish('x.y', { a: 1 }, { msgId: 'm-1' })).resolves.toBe('m-1');
  });

  it('retries the first connection and fails clearly after its time limit', async () => {
    const started = Date.now();
    await expect(connectPublisher({ url: 'nats://127.0.0.1:1', connectTimeoutMs: 600 })).rejects.toThrow(
      /cannot connect to NATS at nats:\/\/127\.0\.0\.1:1/,
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
  });
});

describe('serving requests a turn at a time (handleBatch)', () => {
  it("hands over a turn's messages together and answers each as soon as it settles; a slow one holds up no other", async () => {
    const subjectOf = (n: string) => `test-batch.${suffix}.${n}`;
    const batches: string[][] = [];
    let releaseSlow: () => void = () => {};
    const slowReleased = new Promise<void>((resolve) => {
      releaseSlow = resolve;
    });
    const server = serveRequests({
      connection: nc,
      subjects: [`test-batch.${suffix}.*`],
      queue: 'batch-test',
      what: 'test request',
      logger: createLogger({ service: 'test', instanceId: 'i-1', level: 'silent' }),
      async handleBatch(taken, settle) {
        batches.push(taken.map(({ msg }) => msg.subject.slice(msg.subject.lastIndexOf('.') + 1)));
        const slow: Promise<void>[] = [];
        taken.forEach(({ msg }, i) => {
          const name = msg.subject.slice(msg.subject.lastIndexOf('.') + 1);
          if (name === 'slow') slow.push(slowReleased.then(() => settle(i, { name })));
          else if (name === 'silent') settle(i, undefined);
          else if (name !== 'forgotten') settle(i, { name });
        });
        await Promise.all(slow);
      },
    });
    await server.ready;
    // One client's requests, sent in one go (they reach the server in one read or few, each read's handed over
    // together). Those answered wait up to 20 s, which costs nothing when they are answered; those never answered
    // wait 3 s, which the test waits out.
    const ask = (n: string, timeout = 20_000) => nc.request(subjectOf(n), '', { timeout });
    const [quick, other] = [ask('quick'), ask('other')];
    const slow = ask('slow');
    const silent = ask('silent', 3_000).catch((err: Error) => err);
    const forgotten = ask('forgotten', 3_000).catch((err: Error) => err);
    expect((await quick).json()).toEqual({ name: 'quick' });
    expect((await other).json()).toEqual({ name: 'other' });
    await expect
      .poll(() => batches.flat(), { timeout: 20_000 })
      .toEqual(['quick', 'other', 'slow', 'silent', 'forgotten']);
    // The slow one is still in hand, unanswered: stop() waits for it.
    let stopped = false;
    const stopping = server.stop().then(() => {
      stopped = true;
    });
    await new Promise((r) => setTimeout(r, 200));
    expect(stopped).toBe(false);
    releaseSlow();
    expect((await slow).json()).toEqual({ name: 'slow' });
    await stopping;
    // Settled without an answer, or never settled (released when the handler returned): the requester times out.
    expect(await silent).toBeInstanceOf(Error);
    expect(await forgotten).toBeInstanceOf(Error);
  });
});
