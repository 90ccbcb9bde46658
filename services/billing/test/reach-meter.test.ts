/**
 * A session's bytes a second through the relay (domain/reach/meter.ts): a token bucket holding one second's worth,
 * shared by its streams; a piped stream over it is slowed, never cut, and loses nothing.
 */
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { ByteMeter, metered } from '../src/domain/reach/meter.ts';

describe('a session byte meter', () => {
  it("lets one second's worth pass at once, then asks each source to wait for its share", () => {
    let clock = 1_000_000;
    const meter = new ByteMeter(1000, () => clock);
    expect(meter.take(1000)).toBe(0);
    expect(meter.take(500)).toBe(500);
    // 200 ms later 200 bytes have come back: the debt is 300 bytes, and 100 more wait 400 ms.
    clock += 200;
    expect(meter.take(100)).toBe(400);
    // A long quiet refills one second's worth, never more.
    clock += 60_000;
    expect(meter.take(1000)).toBe(0);
    expect(meter.take(1)).toBe(1);
  });

  it('never limits with a rate of 0', () => {
    const meter = new ByteMeter(0);
    expect(meter.take(10 ** 12)).toBe(0);
  });

  it('slows a piped stream to its rate, every byte kept in order', async () => {
    const meter = new ByteMeter(64 * 1024);
    const chunks = Array.from({ length: 24 }, (_, i) => Buffer.alloc(8 * 1024, i));
    const out: Buffer[] = [];
    const started = Date.now();
    await pipeline(
      Readable.from(chunks),
      metered(meter),
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          out.push(chunk);
          done();
        },
      }),
    );
    // 192 KiB at 64 KiB a second, the first 64 KiB at once: two seconds at least.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
    expect(Buffer.concat(out).equals(Buffer.concat(chunks))).toBe(true);
  });
});
