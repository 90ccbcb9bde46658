import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { HeadObjectCommand, ListMultipartUploadsCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

const MiB = 1024 * 1024;
let svc: TestService;
let bucket: string;
let s3: S3Client;

beforeAll(async () => {
  // A small limit and part size so the over-limit case really starts a multipart upload first.
  svc = await startService({ listen: true, objectStore: { max_upload_size: 12 * MiB, part_size: 5 * MiB } });
  bucket = uniqueBucket('large');
  await svc.store.ensureBucket(bucket);
  s3 = storeClient();
});
afterAll(async () => {
  s3.destroy();
  await svc.close();
});

/** Deterministic bytes, generated chunk by chunk (never held whole). */
function chunkAt(i: number, size: number): Buffer {
  const b = Buffer.alloc(size, i & 0xff);
  for (let j = 0; j + 4 <= size; j += 4) b.writeUInt32LE((i * 2654435761 + j * 40503) >>> 0, j);
  return b;
}

/** Streams `total` bytes to the service, chunked (no Content-Length) unless `declare` is set. */
function streamUpload(
  path: string,
  total: number,
  opts: { declare?: number; base?: string } = {},
): Promise<{ status: number; body: string; sentMd5: string; headers: Record<string, unknown> }> {
  const url = new URL(opts.base ?? svc.url);
  const hash = createHash('md5');
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'content-type': 'application/octet-stream', ...svc.auth };
    if (opts.declare !== undefined) headers['content-length'] = opts.declare;
    const req = request({ host: url.hostname, port: url.port, method: 'PUT', path, headers });
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString(),
          sentMd5: hash.digest('hex'),
          headers: res.headers,
        }),
      );
    });
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    let sent = 0;
    let i = 0;
    const pump = () => {
      while (sent < total && !answered) {
        const size = Math.min(1 * MiB, total - sent);
        const chunk = chunkAt(i++, size);
        hash.update(chunk);
        sent += size;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      if (!answered) req.end();
    };
    pump();
  });
}

async function downloadMd5(path: string, base = svc.url): Promise<{ status: number; md5: string; bytes: number }> {
  const res = await fetch(`${base}${path}`, { headers: svc.auth });
  const hash = createHash('md5');
  let bytes = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    hash.update(chunk);
    bytes += chunk.length;
  }
  return { status: res.status, md5: hash.digest('hex'), bytes };
}

async function pendingUploads(): Promise<number> {
  const out = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  return out.Uploads?.length ?? 0;
}

async function exists(key: string): Promise<boolean> {
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch {
    return false;
  }
}

describe('large and over-limit uploads', () => {
  it('streams a chunked multipart upload under the limit intact', async () => {
    const up = await streamUpload(`/objects/${bucket}/ok/eleven.bin`, 11 * MiB);
    expect(up.status).toBe(201);
    expect(JSON.parse(up.body).size).toBe(11 * MiB);
    const down = await downloadMd5(`/objects/${bucket}/ok/eleven.bin`);
    expect(down).toEqual({ status: 200, md5: up.sentMd5, bytes: 11 * MiB });
    expect(await pendingUploads()).toBe(0);
  });

  it('stores a chunked body that ends exactly at a part boundary intact', async () => {
    const up = await streamUpload(`/objects/${bucket}/ok/two-parts.bin`, 10 * MiB);
    expect(up.status, up.body).toBe(201);
    const down = await downloadMd5(`/objects/${bucket}/ok/two-parts.bin`);
    expect(down).toEqual({ status: 200, md5: up.sentMd5, bytes: 10 * MiB });
    expect(await pendingUploads()).toBe(0);
  });

  it('stores a chunked body smaller than one part, or empty, intact', async () => {
    for (const [key, size] of [
      ['ok/small.bin', 3 * MiB + 7],
      ['ok/empty.bin', 0],
    ] as const) {
      const up = await streamUpload(`/objects/${bucket}/${key}`, size);
      expect(up.status, up.body).toBe(201);
      expect(JSON.parse(up.body).size).toBe(size);
      expect(await downloadMd5(`/objects/${bucket}/${key}`)).toEqual({ status: 200, md5: up.sentMd5, bytes: size });
    }
  });

  it('streams a multipart upload of declared length part by part, intact', async () => {
    const up = await streamUpload(`/objects/${bucket}/ok/declared.bin`, 11 * MiB + 123, { declare: 11 * MiB + 123 });
    expect(up.status, up.body).toBe(201);
    expect(JSON.parse(up.body).size).toBe(11 * MiB + 123);
    const down = await downloadMd5(`/objects/${bucket}/ok/declared.bin`);
    expect(down).toEqual({ status: 200, md5: up.sentMd5, bytes: 11 * MiB + 123 });
    expect(await pendingUploads()).toBe(0);
  });

  it.each([
    { body: 'declared length', key: 'big/abandoned.bin', headers: { 'content-length': 11 * MiB }, chunks: 7 },
    { body: 'chunked, after some parts went up', key: 'big/gone.bin', headers: {}, chunks: 11 },
  ])('aborts the multipart upload when the client goes away mid-body ($body)', async ({ key, headers, chunks }) => {
    const url = new URL(svc.url);
    const req = request({
      host: url.hostname,
      port: url.port,
      method: 'PUT',
      path: `/objects/${bucket}/${key}`,
      headers: { ...headers, ...svc.auth },
    });
    req.on('error', () => {});
    for (let i = 0; i < chunks; i++) req.write(chunkAt(i, MiB));
    await new Promise((r) => setTimeout(r, 500));
    req.destroy();
    const deadline = Date.now() + 30_000;
    while ((await pendingUploads()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await pendingUploads()).toBe(0);
    expect(await exists(key)).toBe(false);
  });

  it('refuses an upload into a missing bucket with 404 and closes the connection instead of reading the rest', async () => {
    const up = await streamUpload(`/objects/${uniqueBucket('absent')}/a.bin`, 11 * MiB, { declare: 11 * MiB });
    expect(up.status).toBe(404);
    expect(JSON.parse(up.body).code).toBe('BUCKET_NOT_FOUND');
    expect(up.headers.connection).toBe('close');
  });

  it.each([
    { body: 'shorter', size: 6 * MiB - 10 },
    { body: 'longer', size: 6 * MiB + 10 },
  ])('answers a body $body than its Content-Length with 400 INCOMPLETE_BODY, storing nothing', async ({ size }) => {
    // Node's HTTP parser never hands over more than Content-Length bytes, and a client that sends fewer is gone
    // before any answer: injecting is the way to show the answer itself.
    const key = `big/mismatch-${size}.bin`;
    const res = await svc.app.inject({
      method: 'PUT',
      url: `/objects/${bucket}/${key}`,
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(6 * MiB) },
      payload: Buffer.alloc(size, 1),
    });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toMatchObject({ code: 'INCOMPLETE_BODY', status: 400 });
    expect(await exists(key)).toBe(false);
    expect(await pendingUploads()).toBe(0);
  });

  it('answers 413 at once for a declared Content-Length over the limit, storing nothing', async () => {
    const up = await streamUpload(`/objects/${bucket}/big/declared.bin`, 13 * MiB, { declare: 13 * MiB });
    expect(up.status).toBe(413);
    expect(JSON.parse(up.body)).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', status: 413 });
    expect(await exists('big/declared.bin')).toBe(false);
  });

  it('answers 413 for a chunked body that passes the limit, leaving no object and no multipart upload', async () => {
    const up = await streamUpload(`/objects/${bucket}/big/chunked.bin`, 20 * MiB);
    expect(up.status).toBe(413);
    expect(JSON.parse(up.body).code).toBe('PAYLOAD_TOO_LARGE');
    expect(await exists('big/chunked.bin')).toBe(false);
    expect(await pendingUploads()).toBe(0);
  });
});

describe('100 MB streamed upload', () => {
  it('uploads 100 MB (declared length, streamed parts) and downloads it byte for byte', async () => {
    // The shipped limits (5 GB, 8 MiB parts).
    const big = await startService({ listen: true });
    try {
      const up = await streamUpload(`/objects/${bucket}/datasets/hundred.bin`, 100 * MiB, {
        base: big.url,
        declare: 100 * MiB,
      });
      expect(up.status, up.body).toBe(201);
      expect(JSON.parse(up.body)).toMatchObject({ key: 'datasets/hundred.bin', size: 100 * MiB });
      const down = await downloadMd5(`/objects/${bucket}/datasets/hundred.bin`, big.url);
      expect(down).toEqual({ status: 200, md5: up.sentMd5, bytes: 100 * MiB });
      expect(await pendingUploads()).toBe(0);
    } finally {
      await big.close();
    }
  });
});

describe('chunked upload memory', () => {
  it('holds queueSize part buffers, whatever the number of parts', async () => {
    const partSize = 5 * MiB;
    const svc2 = await startService({ listen: true, objectStore: { part_size: partSize, queue_size: 2 } });
    const allocations = vi.spyOn(Buffer, 'allocUnsafeSlow');
    try {
      const up = await streamUpload(`/objects/${bucket}/datasets/chunked-60.bin`, 60 * MiB, { base: svc2.url });
      expect(up.status, up.body).toBe(201);
      // 12 parts went up through the same 2 buffers.
      expect(allocations.mock.calls.filter(([size]) => size === partSize).length).toBe(2);
      const down = await downloadMd5(`/objects/${bucket}/datasets/chunked-60.bin`, svc2.url);
      expect(down).toEqual({ status: 200, md5: up.sentMd5, bytes: 60 * MiB });
    } finally {
      allocations.mockRestore();
      await svc2.close();
    }
  });
});

describe('downloads larger than one write batch (1 MiB)', () => {
  const object = randomBytes(3 * MiB + 12_345);
  const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex');

  beforeAll(async () => {
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'batches/object.bin', Body: object }));
  });

  it('sends the whole object and a range that spans batches byte for byte', async () => {
    expect(await downloadMd5(`/objects/${bucket}/batches/object.bin`)).toEqual({
      status: 200,
      md5: md5(object),
      bytes: object.length,
    });
    const res = await fetch(`${svc.url}/objects/${bucket}/batches/object.bin`, {
      headers: { range: `bytes=1000-${2 * MiB + 777}`, ...svc.auth },
    });
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 1000-${2 * MiB + 777}/${object.length}`);
    expect(md5(Buffer.from(await res.arrayBuffer()))).toBe(md5(object.subarray(1000, 2 * MiB + 778)));
  });

  it('survives a client that goes away mid-download, and serves the next one whole', async () => {
    const url = new URL(`${svc.url}/objects/${bucket}/batches/object.bin`);
    const received = await new Promise<number>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, path: url.pathname, headers: svc.auth }, (res) => {
        res.once('data', (chunk: Buffer) => {
          req.destroy();
          resolve(chunk.length);
        });
      });
      req.on('error', () => {});
      req.on('close', () => resolve(0));
      req.end();
      setTimeout(() => reject(new Error('no data')), 10_000);
    });
    expect(received).toBeGreaterThan(0);
    expect(received).toBeLessThan(object.length);
    expect((await fetch(`${svc.url}/health`)).status).toBe(200);
    expect(await downloadMd5(`/objects/${bucket}/batches/object.bin`)).toMatchObject({ status: 200, md5: md5(object) });
  });
});
