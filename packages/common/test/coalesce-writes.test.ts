/**
 * Writes joined per turn (coalesce-writes.ts): pieces written together reach the inner stream as one write, in order,
 * nothing lost; a full inner stream holds the writer back until it drains; reads and the end pass through.
 */
import { Duplex, PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { coalesceWrites } from '../src/coalesce-writes.ts';

describe('coalesceWrites', () => {
  it('joins the pieces written in one turn into one write, in order', async () => {
    const inner = new PassThrough();
    const writes: Buffer[] = [];
    inner.on('data', (d: Buffer) => writes.push(d));
    const outer = coalesceWrites(inner);
    outer.write(Buffer.from('len'));
    outer.write(Buffer.from('-ciphertext-'));
    outer.write(Buffer.from('tag'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(writes.map(String)).toEqual(['len-ciphertext-tag']);
    outer.write(Buffer.from('next turn'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(writes.map(String)).toEqual(['len-ciphertext-tag', 'next turn']);
  });

  it('holds the writer back while the inner stream is full, and loses nothing', async () => {
    const received: Buffer[] = [];
    let release: (() => void) | undefined;
    // An inner stream that takes one write at a time, when told to.
    const inner = new Duplex({
      highWaterMark: 1,
      write(chunk: Buffer, _encoding, done) {
        received.push(chunk);
        release = done;
      },
      read() {},
    });
    const outer = coalesceWrites(inner);
    // More than the writer's own buffer holds (64 KiB by default).
    const chunks = Array.from({ length: 256 }, (_, i) => Buffer.alloc(1024, i));
    let accepted = 0;
    const writer = (async () => {
      for (const c of chunks) {
        if (!outer.write(c)) await new Promise((resolve) => outer.once('drain', resolve));
        accepted += 1;
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The inner stream took one write and holds it: the writer waits (its own buffer full), nothing is dropped.
    expect(accepted).toBeLessThan(chunks.length);
    expect(received).toHaveLength(1);
    while (Buffer.concat(received).length < 256 * 1024) {
      const r = release;
      release = undefined;
      r?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await writer;
    expect(Buffer.concat(received).equals(Buffer.concat(chunks))).toBe(true);
  });

  it('passes reads and the end through', async () => {
    const inner = new PassThrough();
    const outer = coalesceWrites(inner);
    const read: string[] = [];
    outer.on('data', (d: Buffer) => read.push(String(d)));
    const ended = new Promise((resolve) => outer.once('end', resolve));
    inner.end('from the other side');
    await ended;
    expect(read.join('')).toBe('from the other side');
  });
});
