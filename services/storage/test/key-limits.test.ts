/**
 * Keys the object store cannot hold are refused with a 400 naming the limit, on every route that takes a key, before
 * the store is asked anything: the store key's UTF-8 bytes (1024, S3's limit, the user's folder included) and each
 * segment's (`object_store.max_key_segment_bytes`: 233 by default, what the tests' and `pnpm start`'s s3rver holds on
 * a local folder). And a content type that could not travel as an HTTP header is a 400, not the store's failure.
 */
import { randomBytes } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Caller, testEnv, uninjected } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest, startService, type TestService, uniqueBucket } from './helpers.ts';

/** The default of `object_store.max_key_segment_bytes`. */
const SEGMENT = 233;

let svc: TestService;
let bucket: string;
let renter: Caller;
/** The paths of the requests that reached the store (the service talks to it through a recording relay), decoded. */
const storePaths: string[] = [];
let relay: Server;
/** Whether the store was asked about a key holding `text`. */
const storeSaw = (text: string) => storePaths.some((p) => p.includes(text));

/** A relay in front of the tests' S3 server that records what passes through it. */
async function countingRelay(): Promise<string> {
  const target = new URL(testEnv.s3Endpoint.includes('://') ? testEnv.s3Endpoint : `http://${testEnv.s3Endpoint}`);
  relay = createServer((req, res) => {
    storePaths.push(decodeURIComponent(req.url ?? ''));
    const out = request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return `127.0.0.1:${(relay.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  svc = await startService({ listen: true, objectStore: { endpoint: await countingRelay() } });
  bucket = uniqueBucket('keys');
  renter = await svc.issuer.user(['renter']);
  // The renter's own bucket: the refusals below are about keys, not about whose bucket it is.
  const made = await as(renter, { method: 'POST', url: `/buckets/${bucket}` });
  expect(made.statusCode).toBe(201);
});
afterAll(async () => {
  await svc?.close();
  relay?.close();
});

const as = (caller: Caller, req: { method?: string; url: string; payload?: unknown; headers?: object }) =>
  uninjected(svc.app)({ method: 'GET', ...req, headers: { ...caller.headers, ...req.headers } } as never);

const name = (bytes: number) => 'n'.repeat(bytes);

/** Every route that takes a key, for a key in `bucket` (`null`: the caller's folder of the default bucket). */
function keyedRequests(key: string, where: string | null) {
  const path = where === null ? `/objects/${encodeURIComponent(key)}` : `/objects/${where}/${key}`;
  const presign = where === null ? `/presigned-url/${encodeURIComponent(key)}` : `/presigned-url/${where}/${key}`;
  const entry = where === null ? { key } : { bucket: where, key };
  return [
    { method: 'PUT', url: path, payload: 'bytes', headers: { 'content-type': 'text/plain' } },
    { method: 'GET', url: path },
    { method: 'HEAD', url: path },
    { method: 'DELETE', url: path },
    { method: 'GET', url: `${path}?redirect=true` },
    { method: 'POST', url: presign, payload: { method: 'PUT' } },
    { method: 'POST', url: presign, payload: { method: 'GET' } },
    { method: 'POST', url: '/uploads', payload: entry },
  ];
}

describe('a key the store cannot hold', () => {
  it('is refused on every route with a 400 naming the limit, and the store never sees it', async () => {
    const cases: [string, string, string | null][] = [
      ['its last segment', `data/${name(SEGMENT + 1)}`, bucket],
      ['a folder segment', `${name(SEGMENT + 1)}/file.bin`, bucket],
      ['two-byte characters', `data/${'é'.repeat(117)}`, bucket],
      ['the default bucket', name(SEGMENT + 1), null],
    ];
    for (const [what, key, where] of cases) {
      for (const req of keyedRequests(key, where)) {
        const res = await as(renter, req);
        expect(res.statusCode, `${what}: ${req.method} ${req.url.slice(0, 60)}`).toBe(400);
        if (req.method === 'HEAD') continue;
        const problem = res.json();
        expect(problem.code).toBe('VALIDATION_ERROR');
        expect(problem.detail).toContain(`${SEGMENT} bytes`);
        expect(problem.errors[0].path).toBe(req.url === '/uploads' ? 'body.key' : 'params.objectKey');
      }
      expect(storeSaw(key.split('/').find((segment) => segment.length > 100)!), what).toBe(false);
    }
  });

  it("counts the user's folder of the default bucket: the store key may have 1024 bytes in all", async () => {
    // `users/<uuid>/` is 43 bytes: a key of the caller's own 981 bytes is 1024 at the store, one more is too long.
    // Segments of `z`, which no folder's UUID ends with: the store path of the key that fits never holds the long one
    // (with `d/`, a UUID ending in `d` made `…d/d/…` of it, one time in sixteen).
    const key = (bytes: number) => `${'z/'.repeat((bytes - 1) / 2)}f`.padEnd(bytes, 'f');
    const fits = key(981);
    const long = key(983);
    expect(Buffer.byteLength(fits)).toBe(981);
    const put = await as(renter, { method: 'PUT', url: `/objects/${encodeURIComponent(fits)}`, payload: 'x' });
    expect(put.statusCode, put.body).toBe(201);
    const got = await as(renter, { url: `/objects/${encodeURIComponent(fits)}` });
    expect(got.body).toBe('x');
    const refused = await as(renter, { method: 'PUT', url: `/objects/${encodeURIComponent(long)}`, payload: 'x' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().detail).toContain('1024 bytes');
    expect(storeSaw(long)).toBe(false);
  });

  it('is refused in grants, naming the entry, before anything is checked at the store', async () => {
    const asked = storePaths.length;
    const res = await svc.app.inject({
      method: 'POST',
      url: '/grants',
      payload: {
        user_id: renter.id,
        write: [{ key: 'out/ok.txt' }, { key: `out/${name(SEGMENT + 1)}` }],
      },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().errors[0].path).toBe('body.write.1.key');
    expect(res.json().detail).toContain(`${SEGMENT} bytes`);
    // Not even the user's folder, nor the key that would fit.
    expect(storePaths.slice(asked).filter((p) => p.includes(renter.id) || p.includes('out/'))).toEqual([]);
  });
});

describe('a key at the limits', () => {
  it('is stored, read and deleted, on the named and the default-bucket routes (as an admin: keys as they are)', async () => {
    for (const [key, where] of [
      [`data/${name(SEGMENT)}`, bucket],
      [`${name(SEGMENT)}/${'é'.repeat(116)}a`, bucket],
      [`${randomBytes(2).toString('hex')}${name(SEGMENT - 4)}`, null],
    ] as [string, string | null][]) {
      const [put, get, head, del] = keyedRequests(key, where);
      const stored = await svc.app.inject(put as never);
      expect(stored.statusCode, stored.body).toBe(201);
      expect((await svc.app.inject(get as never)).body).toBe('bytes');
      expect((await svc.app.inject(head as never)).statusCode).toBe(200);
      expect((await svc.app.inject(del as never)).statusCode).toBe(204);
    }
    // Through the gateway's kind of client too: real HTTP, the key's bytes percent-encoded.
    const key = `data/${'é'.repeat(116)}a`;
    const put = await rawRequest(svc.url, 'PUT', `/objects/${bucket}/${encodeURI(key)}`, 'over http', svc.auth);
    expect(put.status, put.body).toBe(201);
  });
});

describe('a content type that cannot be a header', () => {
  it.each([
    ['a control character', 'text/plain\u0001'],
    ['a line break', 'text/plain\r\nx-evil: 1'],
    ['a character above U+00FF', 'text/ŝ'],
    ['a character above U+007E', 'text/caf\u00e9'],
  ])('is a 400 naming content_type when an upload starts: %s', async (_what, contentType) => {
    const res = await as(renter, {
      method: 'POST',
      url: '/uploads',
      payload: { key: `ct/${randomBytes(4).toString('hex')}`, content_type: contentType },
    });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().errors[0].path).toBe('body.content_type');
  });

  it('is a 400 on an upload in one request too (a Latin-1 header, as Node reads it)', async () => {
    const res = await rawRequest(svc.url, 'PUT', `/objects/${bucket}/ct/latin1.txt`, 'x', {
      ...svc.auth,
      'content-type': 'text/plain; name="caf\u00e9"',
    });
    expect(res.status, res.body).toBe(400);
    expect(JSON.parse(res.body).errors[0].path).toBe('headers.content-type');
    const head = await svc.app.inject({ method: 'HEAD', url: `/objects/${bucket}/ct/latin1.txt` });
    expect(head.statusCode).toBe(404);
  });
});
