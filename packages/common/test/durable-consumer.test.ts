/**
 * The common durable consumer over a real NATS JetStream server: a transient failure is redelivered and applied once,
 * a bad message is terminated (never delivered again), one that fails every delivery is given up on at its bound and
 * kept in the stream, stop() finishes the message in hand and leaves the rest for
 * the next consumer, and a consumer of another service's stream waits until that stream exists.
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  connectPublisher,
  createLogger,
  type DurableConsumer,
  type DurableConsumerOptions,
  type NatsPublisher,
  type Settlement,
  startDurableConsumer,
} from '../src/index.ts';
import { testEnv } from '../src/testing/index.ts';

const logger = createLogger({ service: 'consumer-test', instanceId: 't', level: 'silent' });
const schema = z.object({ id: z.string(), fail: z.enum(['once', 'never', 'bad']).optional() });
type Body = z.infer<typeof schema>;
let publisher: NatsPublisher;
const streams: string[] = [];

beforeAll(async () => {
  publisher = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'durable-consumer-test',
  })) as NatsPublisher;
});
afterAll(async () => {
  const jsm = await jetstreamManager(publisher.connection);
  for (const s of streams) await jsm.streams.delete(s).catch(() => {});
  await publisher?.close();
});

/** Polls until `done` holds; the generous deadline costs nothing when it does, and a busy machine can be slow. */
async function until<T>(read: () => T | Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A fresh stream and subject, and a recording handler: what it was handed, and what it applied. */
function scene() {
  const suffix = randomBytes(4).toString('hex');
  const stream = `TEST_CONSUMER_${suffix}`;
  streams.push(stream);
  const subject = `test.consumer.${suffix}`;
  const seen: string[] = [];
  const applied: string[] = [];
  let malformed = 0;
  const options = (extra: Partial<DurableConsumerOptions<Body>> = {}): DurableConsumerOptions<Body> => ({
    connection: publisher.connection,
    name: 'test consumer',
    what: 'test message',
    durable: 'test-durable',
    filter: `${subject}.>`,
    stream: { ensure: stream },
    ackWaitMs: 1000,
    retryDelayMs: 100,
    schema,
    async handle(body): Promise<Settlement> {
      seen.push(body.id);
      if (body.fail === 'bad') return 'term';
      if (body.fail === 'once' && seen.filter((id) => id === body.id).length === 1) throw new Error('database away');
      applied.push(body.id);
      return 'ack';
    },
    onMalformed: () => {
      malformed++;
    },
    logger,
    ...extra,
  });
  /** Options whose handler holds each message until `release()`; `inHandler` settles once one is being handled. */
  const gated = (extra: Partial<DurableConsumerOptions<Body>> = {}) => {
    const gate = Promise.withResolvers<void>();
    const entered = Promise.withResolvers<void>();
    const held = options({
      ...extra,
      async handle(body) {
        seen.push(body.id);
        entered.resolve();
        await gate.promise;
        applied.push(body.id);
        return 'ack';
      },
    });
    return { options: held, release: () => gate.resolve(), inHandler: entered.promise };
  };
  const send = (data: unknown) => publisher.publish(`${subject}.x`, data);
  const info = async () => (await jetstreamManager(publisher.connection)).consumers.info(stream, 'test-durable');
  return { stream, subject, seen, applied, malformed: () => malformed, options, gated, send, info };
}

describe('durable consumer', () => {
  it('redelivers a message whose handler failed and applies it once; the messages after it go on meanwhile', async () => {
    const s = scene();
    // a is handed again 2 s after it failed: b, sent right after it, is applied well before that on a busy host too.
    const consumer = startDurableConsumer(s.options({ retryDelayMs: 2000 }));
    try {
      await consumer.ready;
      await s.send({ id: 'a', fail: 'once' });
      await s.send({ id: 'b' });
      await until(
        () => s.applied.length,
        (n) => n >= 2,
      );
      await new Promise((r) => setTimeout(r, 1500)); // past the ack wait: anything unsettled would come again
      // b was not held up by a's retry.
      expect(s.applied).toEqual(['b', 'a']);
      expect(s.seen).toEqual(['a', 'b', 'a']);
      const info = await s.info();
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_pending).toBe(0);
      await expect(consumer.check()).resolves.toBeUndefined();
    } finally {
      await consumer.stop();
    }
  });

  it('handles each message once and in order when handling them all takes many times the ack wait', async () => {
    const s = scene();
    // 20 messages at 500 ms each: 10 s in all, against an ack wait of 3 s. The ones received and waiting their turn
    // must not run out of time and come again (handled twice, out of order, their deliveries counted up).
    const consumer = startDurableConsumer(
      s.options({
        ackWaitMs: 3000,
        async handle(body) {
          s.seen.push(body.id);
          await new Promise((r) => setTimeout(r, 500));
          s.applied.push(body.id);
          return 'ack';
        },
      }),
    );
    try {
      await consumer.ready;
      const ids = Array.from({ length: 20 }, (_, i) => `m${i}`);
      for (const id of ids) await s.send({ id });
      await until(
        () => s.applied.length,
        (n) => n >= ids.length,
        60_000,
      );
      await new Promise((r) => setTimeout(r, 3500)); // past the ack wait: anything unsettled would come again
      expect(s.seen).toEqual(ids);
      const info = await s.info();
      expect(info.num_redelivered).toBe(0);
      expect(info.num_ack_pending).toBe(0);
    } finally {
      await consumer.stop();
    }
  });

  it('lets the messages waiting behind a handler stuck past the ack wait go to another instance', async () => {
    const s = scene();
    const { options: held, release, inHandler } = s.gated();
    const stuck = startDurableConsumer(held);
    const other = startDurableConsumer(s.options());
    try {
      await stuck.ready;
      await s.send({ id: 'stuck' });
      await inHandler;
      await other.ready;
      await s.send({ id: 'behind' });
      // The stuck instance holds 'stuck' in hand, and may have received 'behind': kept alive only while it makes
      // progress, it runs out after its ack wait (1 s) and the other instance applies it.
      expect(
        await until(
          () => s.applied.includes('behind'),
          (done) => done,
        ),
      ).toBe(true);
    } finally {
      release();
      await Promise.all([stuck.stop(), other.stop()]);
    }
  });

  it('terminates a malformed message and one its handler judges bad: neither is delivered again', async () => {
    const s = scene();
    const consumer = startDurableConsumer(s.options());
    try {
      await consumer.ready;
      await s.send({ nonsense: true });
      await s.send('not even an object');
      await s.send({ id: 'rejected', fail: 'bad' });
      await s.send({ id: 'good' });
      await until(
        () => s.applied.length,
        (n) => n >= 1,
      );
      await new Promise((r) => setTimeout(r, 1500)); // past the ack wait and the retry delay
      expect(s.malformed()).toBe(2);
      expect(s.seen).toEqual(['rejected', 'good']);
      expect(s.applied).toEqual(['good']);
      const info = await s.info();
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_redelivered).toBe(0);
    } finally {
      await consumer.stop();
    }
  });

  it('gives up on a message that fails every delivery up to its bound, counting it; the stream keeps it', async () => {
    const s = scene();
    let gaveUp = 0;
    const consumer = startDurableConsumer(
      s.options({
        maxDeliver: 3,
        onGaveUp: () => {
          gaveUp++;
        },
        async handle(body) {
          s.seen.push(body.id);
          if (body.fail === 'never') throw new Error('database away');
          s.applied.push(body.id);
          return 'ack';
        },
      }),
    );
    try {
      await consumer.ready;
      await s.send({ id: 'doomed', fail: 'never' });
      await s.send({ id: 'fine' });
      await until(
        () => gaveUp,
        (n) => n >= 1,
      );
      await new Promise((r) => setTimeout(r, 1500)); // past the ack wait and the retry delay: nothing comes again
      expect(s.seen.filter((id) => id === 'doomed')).toHaveLength(3);
      expect(s.applied).toEqual(['fine']);
      expect(gaveUp).toBe(1);
      const info = await s.info();
      expect(info.config.max_deliver).toBe(3);
      expect(info.num_ack_pending).toBe(0);
      // The message is still in the stream, for an operator to read and publish again.
      const jsm = await jetstreamManager(publisher.connection);
      const kept = await jsm.streams.getMessage(s.stream, { seq: 1 });
      expect(kept?.json()).toEqual({ id: 'doomed', fail: 'never' });
    } finally {
      await consumer.stop();
    }
  });

  it('stop() finishes and acknowledges the message in hand; what comes after waits for the next consumer', async () => {
    const s = scene();
    // Several in hand at once (as billing's usage consumer runs): stop() must wait for those still being handled.
    const { options: slow, release, inHandler } = s.gated({ concurrency: 4 });
    const first = startDurableConsumer(slow);
    await first.ready;
    await s.send({ id: 'in-hand' });
    await inHandler;
    // Stopping while the handler still works: stop() waits for it and its acknowledgement.
    setTimeout(release, 300);
    await first.stop();
    expect(s.applied).toEqual(['in-hand']);
    await expect(first.check()).rejects.toThrow('test consumer is stopped');

    await s.send({ id: 'after-stop' });
    await new Promise((r) => setTimeout(r, 300));
    expect(s.seen).toEqual(['in-hand']);
    const info = await s.info();
    expect(info.num_ack_pending).toBe(0);
    expect(info.num_pending).toBe(1);

    const second = startDurableConsumer(s.options());
    try {
      await second.ready;
      await until(
        () => s.applied.length,
        (n) => n >= 2,
      );
      await new Promise((r) => setTimeout(r, 1500));
      expect(s.applied).toEqual(['in-hand', 'after-stop']);
    } finally {
      await second.stop();
    }
  });

  it('stop() begins none of the messages received and waiting: the next consumer has them, each handled once', async () => {
    const s = scene();
    const { options: held, release, inHandler } = s.gated();
    const first = startDurableConsumer(held);
    await first.ready;
    for (const id of ['in-hand', 'queued-1', 'queued-2']) await s.send({ id });
    await inHandler;
    // All three delivered to the first consumer (one in hand, two waiting their turn).
    expect(
      await until(
        async () => (await s.info()).num_ack_pending,
        (n) => n === 3,
      ),
    ).toBe(3);
    setTimeout(release, 300);
    await first.stop();
    expect(s.applied).toEqual(['in-hand']);

    const second = startDurableConsumer(s.options());
    try {
      await second.ready;
      await until(
        () => s.applied.length,
        (n) => n >= 3,
        30_000,
      );
      await new Promise((r) => setTimeout(r, 1500)); // past the ack wait: anything unsettled would come again
      expect(s.applied).toEqual(['in-hand', 'queued-1', 'queued-2']);
    } finally {
      await second.stop();
    }
  });

  it('takes a changed ack wait onto the existing durable consumer, and refuses to rewrite its subject', async () => {
    const s = scene();
    const before = startDurableConsumer(s.options({ filter: `${s.subject}.old.>` }));
    await before.ready;
    await before.stop();
    expect((await s.info()).config).toMatchObject({ filter_subject: `${s.subject}.old.>`, ack_wait: 1000 * 1e6 });

    const slower = startDurableConsumer(s.options({ filter: `${s.subject}.old.>`, ackWaitMs: 2000 }));
    await slower.ready;
    await slower.stop();
    expect((await s.info()).config).toMatchObject({ filter_subject: `${s.subject}.old.>`, ack_wait: 2000 * 1e6 });

    // Another subject under the same durable name (instances on the old setting may still run): it stays down and
    // says why, and the consumer keeps its subject; nothing is taken from the stream.
    await publisher.publish(`${s.subject}.old.x`, { id: 'on-the-old-subject' });
    const other = startDurableConsumer(s.options({ filter: `${s.subject}.new.>`, ackWaitMs: 2000 }));
    try {
      await expect(other.ready).rejects.toThrow(
        /reads .*\.old\.>, not the configured .*\.new\.>: give the new subject/,
      );
      await expect(other.check()).rejects.toThrow(/test consumer failed: the durable consumer "test-durable"/);
      const info = await s.info();
      expect(info.config.filter_subject).toBe(`${s.subject}.old.>`);
      expect(info.num_pending).toBe(1);
      expect(s.seen).toEqual([]);
    } finally {
      await other.stop();
    }
  });

  it("waits for another service's stream, healthy meanwhile, and consumes once its owner made it", async () => {
    const s = scene();
    const consumer: DurableConsumer = startDurableConsumer(s.options({ stream: { await: 'the test stream' } }));
    try {
      await new Promise((r) => setTimeout(r, 300));
      await expect(consumer.check()).resolves.toBeUndefined();
      const owner = await connectPublisher({
        url: testEnv.natsUrl,
        credentials: testEnv.natsCredentials,
        stream: { name: s.stream, subjects: [`${s.subject}.>`] },
      });
      try {
        await owner.publish(`${s.subject}.x`, { id: 'from-owner' });
      } finally {
        await owner.close();
      }
      await consumer.ready;
      await until(
        () => s.applied.length,
        (n) => n >= 1,
      );
      expect(s.applied).toEqual(['from-owner']);
    } finally {
      await consumer.stop();
    }
  });
});
