import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, get, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReadBufferAgent } from '../src/adapters/read-buffer-agent.ts';

const MiB = 1024 * 1024;
const SIZE = 6 * MiB + 12345;

/** Bytes that differ from one offset to the next, so a reused read buffer shows up as corruption. */
function patternAt(offset: number, length: number): Buffer {
  const b = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) b[i] = ((offset + i) * 2654435761) >>> 24;
  return b;
}
const expectedMd5 = createHash('md5').update(patternAt(0, SIZE)).digest('hex');

let server: Server;
let base: string;
const agent = new ReadBufferAgent(64 * 1024, { keepAlive: true, maxSockets: 4 });

beforeAll(async () => {
  server = createServer((req, res) => {
    res.writeHead(200, { 'content-length': SIZE, 'x-remote-port': String(req.socket.remotePort) });
    let sent = 0;
    const pump = () => {
      while (sent < SIZE) {
        const n = Math.min(300_000, SIZE - sent);
        const more = res.write(patternAt(sent, n));
        sent += n;
        if (!more) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  agent.destroy();
  await new Promise((r) => server.close(r));
});

function fetchThroughAgent(): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => get(`${base}/`, { agent }, resolve).on('error', reject));
}

/** Reads the body slowly (pausing after each chunk), so the socket fills, pauses and resumes many times. */
async function slowMd5(res: IncomingMessage): Promise<{ md5: string; bytes: number }> {
  const hash = createHash('md5');
  let bytes = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    hash.update(chunk);
    bytes += chunk.length;
    await new Promise((r) => setTimeout(r, 1));
  }
  return { md5: hash.digest('hex'), bytes };
}

describe('ReadBufferAgent (sockets that read into one reused buffer)', () => {
  it('delivers a body byte for byte to a slow reader, across pauses', async () => {
    const res = await fetchThroughAgent();
    expect(res.statusCode).toBe(200);
    expect(await slowMd5(res)).toEqual({ md5: expectedMd5, bytes: SIZE });
  });

  it('keeps a socket alive for the next request, which arrives intact too', async () => {
    const first = await fetchThroughAgent();
    await slowMd5(first);
    const second = await fetchThroughAgent();
    // The same client socket (one remote port) served both: the reused buffer carried over between responses.
    expect(second.headers['x-remote-port']).toBe(first.headers['x-remote-port']);
    expect(await slowMd5(second)).toEqual({ md5: expectedMd5, bytes: SIZE });
  });

  it('serves concurrent responses on separate sockets, each intact', async () => {
    const results = await Promise.all([1, 2, 3].map(async () => slowMd5(await fetchThroughAgent())));
    for (const r of results) expect(r).toEqual({ md5: expectedMd5, bytes: SIZE });
  });
});
