import { createServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(() => svc.close());

describe('POST /buckets/{bucketName}', () => {
  it('creates a missing bucket with 201, and answers 201 again when it exists', async () => {
    const bucket = uniqueBucket();
    const first = await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}` });
    expect(first.statusCode).toBe(201);
    expect(first.json()).toEqual({ message: 'bucket created', bucket, created: true });
    const second = await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}` });
    expect(second.statusCode).toBe(201);
    expect(second.json()).toEqual({ message: 'bucket already exists', bucket, created: false });
    const upload = await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/a.txt`, payload: 'hi' });
    expect(upload.statusCode).toBe(201);
  });

  it.each([
    ['ab', 'must be 3 to 63 characters long'],
    ['a'.repeat(64), 'must be 3 to 63 characters long'],
    ['Upper-Case', 'lowercase'],
    ['under_score', 'lowercase'],
    ['-leading', 'begin and end'],
    ['two..dots', 'two adjacent dots'],
    ['192.168.1.1', 'IP address'],
    ['xn--punycode', 'reserved prefix'],
    ['name-s3alias', 'reserved suffix'],
  ])('rejects the bucket name %j with a 400 problem', async (name, why) => {
    const res = await svc.app.inject({ method: 'POST', url: `/buckets/${encodeURIComponent(name)}` });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR', status: 400 });
    expect(res.json().detail).toContain(why);
  });
});

describe('GET /health', () => {
  it('is UP with the object store reachable', async () => {
    const res = await svc.app.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      status: 'UP',
      service: 'storage-service',
      checks: { object_store: { status: 'UP' } },
    });
  });

  it('is 503 DOWN naming the object store when it cannot be reached, and routes answer 503', async () => {
    const down = await startService({ objectStore: { endpoint: '127.0.0.1:1', default_bucket: '' } });
    try {
      const res = await down.app.inject({ method: 'GET', url: '/health' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ status: 'DOWN', checks: { object_store: { status: 'DOWN' } } });
      const get = await down.app.inject({ method: 'GET', url: '/objects/some-bucket/a.txt' });
      expect(get.statusCode).toBe(503);
      expect(get.json()).toMatchObject({ code: 'DEPENDENCY_UNAVAILABLE', dependency: 'object store' });
    } finally {
      await down.close();
    }
  });

  it('answers 503 REQUEST_TIMEOUT when the store does not answer within request_timeout', async () => {
    // A store that accepts connections and never answers.
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    const slow = await startService({
      objectStore: { endpoint: `127.0.0.1:${port}`, default_bucket: '' },
      settings: { request_timeout: '300ms' },
    });
    try {
      const res = await slow.app.inject({ method: 'GET', url: `/objects/${uniqueBucket()}/list` });
      expect(res.statusCode).toBe(503);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json()).toMatchObject({ code: 'REQUEST_TIMEOUT', status: 503 });
    } finally {
      await slow.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
