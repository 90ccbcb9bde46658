/**
 * The byte relay between two TCP sockets (`relayBytes`): connections a real server accepted on loopback, joined as
 * billing joins a renter's stream and a daemon's dial-back. Taken over (each read into a buffer of a pool the process
 * shares), they must still carry every byte in order both ways, several streams at once with slow readers (a buffer
 * read into again before its write went out would corrupt them), pass the bytes read before the join first, pass each
 * end while the other way goes on, read on to a side's end once the other side is gone, follow the pace, count bytes
 * (what was said before the join once), hold only small buffers for idle streams, and leave the sockets handed in as
 * shells that close with the connection and end, reset or cut it. Sockets that cannot be taken over are relayed as
 * streams with the same results.
 */
import { createHash, randomBytes } from 'node:crypto';
import net, { type AddressInfo, type Socket } from 'node:net';
import { type Duplex, PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { relayBytes, streamBytes } from '../src/http/byte-relay.ts';

let server: net.Server;
let port = 0;
const accepted: Socket[] = [];
const waiting: ((s: Socket) => void)[] = [];
const opened = new Set<Socket>();

beforeAll(async () => {
  server = net.createServer({ allowHalfOpen: true }, (socket) => {
    opened.add(socket);
    const take = waiting.shift();
    if (take) take(socket);
    else accepted.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  for (const s of opened) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** A connection to the server: the peer's end and the end the server accepted. */
async function connection(): Promise<{ peer: Socket; near: Socket }> {
  const near = new Promise<Socket>((resolve) => {
    const ready = accepted.shift();
    if (ready) resolve(ready);
    else waiting.push(resolve);
  });
  const peer = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  opened.add(peer);
  await new Promise<void>((resolve) => peer.once('connect', resolve));
  return { peer, near: await near };
}

/** Two peers joined through the relay, as billing joins a renter's stream to a dial-back. */
async function joined(opts: Parameters<typeof relayBytes>[2] = {}) {
  const a = await connection();
  const b = await connection();
  const sides = relayBytes(a.near, b.near, opts);
  for (const side of sides) side.on('error', () => {});
  return { a, b, sides };
}

/** Everything `s` says until its end, with its SHA-256; read slowly (paused a moment every `slowEvery` bytes). */
function drain(s: Duplex, slowEvery = 0): Promise<{ bytes: number; sha: string }> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    let bytes = 0;
    let sincePause = 0;
    s.on('data', (d: Buffer) => {
      hash.update(d);
      bytes += d.length;
      sincePause += d.length;
      if (slowEvery > 0 && sincePause >= slowEvery) {
        sincePause = 0;
        s.pause();
        setTimeout(() => s.resume(), 2);
      }
    });
    s.once('end', () => resolve({ bytes, sha: hash.digest('hex') }));
    s.once('error', reject);
  });
}

/** Writes `total` random bytes to `s` as fast as it takes them, then ends it; their SHA-256. */
async function send(s: Socket, total: number): Promise<string> {
  const hash = createHash('sha256');
  let sent = 0;
  while (sent < total) {
    const chunk = randomBytes(Math.min(1 << 20, total - sent));
    hash.update(chunk);
    sent += chunk.length;
    if (!s.write(chunk)) await new Promise((resolve) => s.once('drain', resolve));
  }
  s.end();
  return hash.digest('hex');
}

describe('relayBytes between two accepted TCP sockets', () => {
  it('takes both over and carries every byte in order both ways, several streams at once, readers slow', async () => {
    // Buffers go back to one pool for the process: one reused while a write of another stream still held it would
    // corrupt that stream.
    const total = 12 * 1024 * 1024;
    await Promise.all(
      [0, 1, 2].map(async (n) => {
        const { a, b, sides } = await joined();
        expect(sides[0]).not.toBe(a.near);
        expect(sides[1]).not.toBe(b.near);
        const [toB, toA, atB, atA] = await Promise.all([
          send(a.peer, total),
          send(b.peer, total),
          drain(b.peer, (n + 1) * 256 * 1024),
          drain(a.peer, n === 0 ? 0 : 1024 * 1024),
        ]);
        expect(atB).toEqual({ bytes: total, sha: toB });
        expect(atA).toEqual({ bytes: total, sha: toA });
        expect(streamBytes(a.near)).toEqual({ read: total, written: total });
        expect(streamBytes(b.near)).toEqual({ read: total, written: total });
      }),
    );
  });

  it('counts what a socket said before the join once, with what it carries after', async () => {
    const a = await connection();
    const b = await connection();
    const answer = 'HTTP/1.1 101 Switching Protocols\r\n\r\n';
    const heardAnswer = new Promise<void>((resolve) => a.peer.once('data', () => resolve()));
    a.near.write(answer);
    a.peer.write('hello');
    await heardAnswer;
    await new Promise<void>((resolve) => a.near.once('readable', resolve));
    expect(a.near.writableLength).toBe(0);
    const sides = relayBytes(a.near, b.near);
    expect(sides[0]).not.toBe(a.near);
    const atA = drain(a.peer);
    const atB = drain(b.peer);
    a.peer.end(' world');
    b.peer.end('from b');
    expect((await atB).bytes).toBe('hello world'.length);
    expect((await atA).bytes).toBe('from b'.length);
    expect(streamBytes(a.near)).toEqual({ read: 'hello world'.length, written: answer.length + 'from b'.length });
  });

  it('reads on to its own end once the other side is gone', async () => {
    const { a, sides } = await joined();
    sides[1].destroy();
    const ended = new Promise<void>((resolve) => sides[0].once('end', () => resolve()));
    // What comes for the gone side is read and dropped, so that the end behind it is seen.
    a.peer.write(randomBytes(3 * 1024 * 1024));
    a.peer.end();
    await ended;
  });

  it('holds small buffers for idle streams', async () => {
    const before = process.memoryUsage().arrayBuffers;
    const idle = await Promise.all(Array.from({ length: 30 }, () => joined()));
    const held = process.memoryUsage().arrayBuffers - before;
    // Two 16 KiB buffers a stream (each way's next read), where a buffer of the size a busy stream reads (1 MiB)
    // would be 60 MiB.
    expect(held).toBeLessThan(8 * 1024 * 1024);
    // And a stream that went idle reads small again: its bytes still pass.
    const { a, b } = idle[0]!;
    const heard = drain(b.peer);
    a.peer.end('still here');
    expect((await heard).bytes).toBe('still here'.length);
  });

  it('passes the bytes read before the join first', async () => {
    const a = await connection();
    const b = await connection();
    a.peer.write('early words|');
    // Read by the accepted socket and kept (as an upgrade's first bytes are).
    await new Promise<void>((resolve) => a.near.once('readable', resolve));
    a.near.pause();
    const heard = drain(b.peer);
    const sides = relayBytes(a.near, b.near);
    expect(sides[0]).not.toBe(a.near);
    a.peer.end('later words');
    b.peer.end();
    expect((await heard).bytes).toBe('early words|later words'.length);
  });

  it("passes one side's end while the other way goes on (a half-close)", async () => {
    const { a, b } = await joined();
    const bHeard = drain(b.peer);
    a.peer.end('question');
    expect((await bHeard).bytes).toBe('question'.length);
    // b's way is still open: its answer reaches a, then its end.
    const aHeard = drain(a.peer);
    b.peer.end('answer after the end');
    expect((await aHeard).bytes).toBe('answer after the end'.length);
  });

  it('reads on only as fast as the pace lets it, counting every byte', async () => {
    let paced = 0;
    const { a, b } = await joined({
      pace: (n) => {
        paced += n;
        return 1;
      },
    });
    const total = 4 * 1024 * 1024;
    const [sha, heard] = await Promise.all([send(a.peer, total), drain(b.peer)]);
    b.peer.end();
    expect(heard).toEqual({ bytes: total, sha });
    expect(paced).toBe(total);
  });

  it('leaves the sockets handed in as shells: destroying one cuts the connection, and both close with it', async () => {
    const { a, b, sides } = await joined();
    const shellClosed = new Promise<void>((resolve) => b.near.once('close', () => resolve()));
    // (The peers are half-open: a peer learns its connection closed as its end.)
    const peerEnded = new Promise<void>((resolve) => a.peer.once('end', () => resolve()));
    a.peer.resume();
    a.near.destroy();
    await peerEnded;
    expect(sides[0].destroyed).toBe(true);
    // The relay joins no closing (the caller does): b's shell closes when its connection does (reset by its peer).
    b.peer.resetAndDestroy();
    await shellClosed;
    expect(sides[1].destroyed).toBe(true);
  });
  it("passes a shell's end and reset to the connection", async () => {
    const { a, b } = await joined();
    const ended = new Promise<void>((resolve) => a.peer.once('end', () => resolve()));
    a.peer.resume();
    a.near.end();
    await ended;
    const reset = new Promise<string>((resolve) =>
      b.peer.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? '')),
    );
    b.peer.resume();
    b.near.resetAndDestroy();
    expect(await reset).toBe('ECONNRESET');
  });
});

describe('relayBytes where a side cannot be taken over', () => {
  it('relays as streams a socket whose end was read before the join', async () => {
    const a = await connection();
    const b = await connection();
    a.peer.end('all at once');
    await new Promise<void>((resolve) => a.near.once('readable', resolve));
    await new Promise((resolve) => setTimeout(resolve, 50));
    a.near.pause();
    const heard = drain(b.peer);
    const sides = relayBytes(a.near, b.near);
    expect(sides).toEqual([a.near, b.near]);
    b.peer.end();
    expect((await heard).bytes).toBe('all at once'.length);
  });

  it('relays as streams a side that is no socket', async () => {
    const b = await connection();
    const stream = new PassThrough();
    const sides = relayBytes(stream, b.near);
    expect(sides[0]).toBe(stream);
    const payload = randomBytes(3 * 1024 * 1024);
    const heard = drain(b.peer, 256 * 1024);
    stream.end(payload);
    const got = await heard;
    expect(got.bytes).toBe(payload.length);
    expect(got.sha).toBe(createHash('sha256').update(payload).digest('hex'));
    b.peer.end();
  });
});
