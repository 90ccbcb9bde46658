/** Discovery pages are sent from reused buffers: every response must carry exactly its own elements. */
import { once } from 'node:events';
import { connect } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeJsonArray, JsonArraySender } from '../src/routes/json-array.ts';

describe('encodeJsonArray', () => {
  it('writes the elements as one JSON array, in UTF-8', () => {
    const out = Buffer.alloc(64);
    const elements = ['{"a":1}', '"ünï ✓"', '[]'];
    const n = encodeJsonArray(elements, out);
    expect(out.subarray(0, n).toString('utf8')).toBe('[{"a":1},"ünï ✓",[]]');
    expect(JSON.parse(out.subarray(0, n).toString('utf8'))).toEqual([{ a: 1 }, 'ünï ✓', []]);
    expect(out.subarray(0, encodeJsonArray([], out)).toString()).toBe('[]');
  });
});

describe('JsonArraySender', () => {
  const app = Fastify();
  const sender = new JsonArraySender();
  let base = '';
  // Pages of different sizes and contents, so that a reused buffer holding another page's bytes would show.
  const page = (n: number) =>
    Array.from({ length: n }, (_, i) => JSON.stringify({ page: n, i, pad: 'é'.repeat((n * 37 + i) % 500) }));
  beforeAll(async () => {
    app.get<{ Querystring: { n: string } }>('/page', async (request, reply) =>
      sender.send(reply, page(Number(request.query.n))),
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  });
  afterAll(() => app.close());

  it('answers every concurrent request with its own page', async () => {
    const sizes = Array.from({ length: 60 }, (_, i) => [0, 1, 150, 400, 1200][i % 5]!);
    const answers = await Promise.all(
      sizes.map(async (n) => {
        const res = await fetch(`${base}/page?n=${n}`);
        expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
        const text = await res.text();
        expect(Number(res.headers.get('content-length'))).toBe(Buffer.byteLength(text));
        return { n, body: JSON.parse(text) as unknown[] };
      }),
    );
    for (const { n, body } of answers) expect(body).toEqual(page(n).map((e) => JSON.parse(e)));
  });

  it('keeps a page intact while a slow client has not read it yet', async () => {
    // A page larger than the socket buffers: part of it waits in the process until the client reads.
    const big = 12_000;
    const slow = connect((app.server.address() as { port: number }).port, '127.0.0.1');
    await once(slow, 'connect');
    slow.pause();
    slow.write(`GET /page?n=${big} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    await new Promise((r) => setTimeout(r, 300));
    // Meanwhile other pages of the same size class are answered (and their buffers handed back).
    for (const n of [big - 1, big - 2]) {
      expect(((await (await fetch(`${base}/page?n=${n}`)).json()) as unknown[]).length).toBe(n);
    }
    const chunks: Buffer[] = [];
    slow.on('data', (c: Buffer) => chunks.push(c));
    slow.resume();
    await once(slow, 'end');
    const raw = Buffer.concat(chunks).toString('utf8');
    const body = raw.slice(raw.indexOf('\r\n\r\n') + 4);
    expect(JSON.parse(body)).toEqual(page(big).map((e) => JSON.parse(e)));
  });
});
