/**
 * Raw byte streams over an HTTP/1.1 upgrade (`Upgrade: tcp`) and the pacing relays use: a real server and client on
 * loopback (bytes both ways, the half-close passed, the 101's early bytes, a refusal read as its problem, an abort),
 * and `pump`/`writePaced` against destinations slower than their source (a socket's 16 KiB mark and an SSH channel's
 * 2 MiB one): nothing lost, nothing stalled, no more held than the high-water mark.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { type Duplex, PassThrough, Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  acceptRawUpgrade,
  isRawUpgrade,
  openRawUpgrade,
  pump,
  UpgradeRefused,
  writePaced,
} from '../src/http/raw-upgrade.ts';

let server: http.Server;
let base = '';
const sockets = new Set<Socket>();

beforeAll(async () => {
  server = http.createServer((_req, res) => res.end('plain'));
  server.on('upgrade', (req, socket: Socket, head: Buffer) => {
    sockets.add(socket);
    if (req.url === '/refuse') {
      const body = JSON.stringify({ status: 403, code: 'NOT_YOURS', detail: 'not your stream' });
      socket.end(
        `HTTP/1.1 403 Forbidden\r\ncontent-type: application/problem+json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
      return;
    }
    if (req.url === '/page') {
      socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 11\r\n\r\n<html></html>'.replace('11', '13'));
      return;
    }
    if (req.url === '/silent') return;
    expect(isRawUpgrade(req.headers)).toBe(true);
    const stream = acceptRawUpgrade(socket, head);
    if (req.url === '/greet') stream.write('first words|');
    // Echoes upper-cased; its end answered with a last line once the client's end came (a half-close passed).
    stream.on('data', (d: Buffer) => stream.write(d.toString().toUpperCase()));
    stream.once('end', () => stream.end('|your end came'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** Everything a stream says until its end. */
const readAll = (s: Duplex) =>
  new Promise<string>((resolve) => {
    let text = '';
    s.on('data', (d: Buffer) => {
      text += String(d);
    });
    s.once('end', () => resolve(text));
  });

describe('a raw byte stream over an upgrade', () => {
  it('carries bytes both ways, the server speaking first, and passes the half-close', async () => {
    const stream = await openRawUpgrade(`${base}/greet`, { headers: { authorization: 'Bearer x' } });
    const said = readAll(stream);
    stream.end('ask, then end');
    expect(await said).toBe('first words|ASK, THEN END|your end came');
    stream.destroy();
  });

  it('reads a refusal as its problem, a page as its text, and stops when aborted', async () => {
    const refused = await openRawUpgrade(`${base}/refuse`).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UpgradeRefused);
    expect((refused as UpgradeRefused).status).toBe(403);
    expect((refused as UpgradeRefused).problem()).toMatchObject({ code: 'NOT_YOURS' });
    const page = (await openRawUpgrade(`${base}/page`).catch((e: unknown) => e)) as UpgradeRefused;
    expect(page.problem()).toEqual({ detail: '<html></html>' });
    // A server that never answers: the caller gives up when told.
    const stop = new AbortController();
    const waiting = openRawUpgrade(`${base}/silent`, { signal: stop.signal });
    setTimeout(() => stop.abort(), 50);
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
  });
});

/** A destination that takes a chunk every few milliseconds, with the high-water mark given. */
function slowSink(highWaterMark: number) {
  const got: Buffer[] = [];
  let most = 0;
  const sink = new Writable({
    highWaterMark,
    write(chunk: Buffer, _enc, done) {
      got.push(chunk);
      setTimeout(done, 1);
    },
  });
  const write = sink.write.bind(sink);
  sink.write = ((chunk: Buffer) => {
    const ok = write(chunk);
    most = Math.max(most, sink.writableLength);
    return ok;
  }) as typeof sink.write;
  return { sink, got, most: () => most };
}

describe('pacing a relay', () => {
  it('never stalls on a destination whose own mark is above its high-water mark (an SSH channel: 2 MiB)', async () => {
    const sent = randomBytes(16 * 1024 * 1024);
    const source = new PassThrough({ highWaterMark: 64 * 1024 });
    const { sink, got } = slowSink(2 * 1024 * 1024);
    const finished = new Promise((resolve) => sink.once('finish', resolve));
    pump(source as Duplex, sink as unknown as Duplex);
    for (let at = 0; at < sent.length; at += 64 * 1024) {
      if (!source.write(sent.subarray(at, at + 64 * 1024))) await new Promise((r) => source.once('drain', r));
    }
    source.end();
    await finished;
    expect(Buffer.concat(got).equals(sent)).toBe(true);
  });

  it('holds its source back past 1 MiB unsent on a socket-like destination, and keeps to a pace', async () => {
    const { sink, got, most } = slowSink(16 * 1024);
    const source = new PassThrough();
    const chunk = Buffer.alloc(64 * 1024, 1);
    let waited = 0;
    // A pace of 1 ms a chunk: 32 chunks take at least about 32 ms.
    const pacing = { pace: () => 1 };
    const started = Date.now();
    source.on('data', (d: Buffer) => writePaced(sink, d, source, pacing));
    for (let i = 0; i < 32; i++) source.write(chunk);
    source.end();
    await new Promise((resolve) => source.once('end', resolve));
    sink.end();
    await new Promise((resolve) => sink.once('finish', resolve));
    waited = Date.now() - started;
    expect(Buffer.concat(got)).toHaveLength(32 * chunk.length);
    expect(most()).toBeLessThanOrEqual(1024 * 1024 + chunk.length);
    expect(waited).toBeGreaterThanOrEqual(25);
  });
});
