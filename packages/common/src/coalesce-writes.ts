/**
 * Writes made in one turn of the event loop, joined into one: for a byte stream over a message transport (SSH over a
 * WebSocket, where each write is a frame of its own), a protocol that writes each packet in pieces (ssh2 writes its
 * length, its ciphertext and its tag apart) then sends one frame per turn instead of three per packet. Backpressure
 * passes through: once the inner stream is full, writes wait for it to drain. Reads pass through as they are.
 */
import { Duplex } from 'node:stream';

/** The most bytes joined into one write (a frame stays well under a WebSocket's `maxPayload`). */
const MAX_JOINED = 1024 * 1024;

export function coalesceWrites(inner: Duplex): Duplex {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let scheduled = false;
  let blocked = false;
  const waiting: (() => void)[] = [];

  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const data = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    if (inner.destroyed) return;
    if (!inner.write(data) && !blocked) {
      blocked = true;
      inner.once('drain', () => {
        blocked = false;
        for (const done of waiting.splice(0)) done();
      });
    }
  };

  const outer = new Duplex({
    write(chunk: Buffer, _encoding, done) {
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= MAX_JOINED) flush();
      else if (!scheduled) {
        scheduled = true;
        queueMicrotask(flush);
      }
      if (blocked) waiting.push(() => done());
      else done();
    },
    final(done) {
      flush();
      inner.end();
      done();
    },
    read() {
      inner.resume();
    },
    destroy(err, done) {
      pending = [];
      inner.destroy(err ?? undefined);
      done(err);
    },
  });
  inner.on('data', (data: Buffer) => {
    if (!outer.push(data)) inner.pause();
  });
  inner.once('end', () => outer.push(null));
  inner.once('error', (err) => outer.destroy(err));
  inner.once('close', () => {
    if (!outer.destroyed) outer.destroy();
  });
  return outer;
}
