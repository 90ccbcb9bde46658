/**
 * Uploads of a job's output through presigned PUT URLs, against the real storage service and the test run's s3rver
 * (which checks SigV4 signatures, method and expiry as S3 does): a renter owns a bucket, presigns a PUT URL at storage
 * and hands it to the daemon; the renter then reads the object back through storage.
 *
 * Failures of the store are made by a small HTTP proxy in front of the real s3rver (a second storage instance signs
 * its URLs for the proxy as its `public_endpoint`): it passes requests through as they are (the Host header too, so
 * signatures hold), and when told, answers one request 503, cuts its connection, holds it without answering, or
 * changes the ETag of the store's answer.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from '../../../services/storage/test/helpers.ts';
import { MAX_SINGLE_PUT_BYTES, UploadError, uploadFile } from '../src/upload.ts';

type Fault = '503' | 'reset' | 'hang' | 'etag';

/** The proxy in front of s3rver: what reached it, and the faults to play on the next requests, one each. */
interface StoreProxy {
  url: string;
  requests: { method: string; contentLength: string | undefined; answered: number | Fault }[];
  faults: Fault[];
  close(): Promise<void>;
}

async function startStoreProxy(upstream: string): Promise<StoreProxy> {
  const target = new URL(upstream);
  const proxy: Omit<StoreProxy, 'url' | 'close'> = { requests: [], faults: [] };
  const server: Server = createServer((req, res) => {
    const fault = proxy.faults.shift();
    const seen = { method: req.method ?? '', contentLength: req.headers['content-length'] };
    if (fault === '503') {
      proxy.requests.push({ ...seen, answered: 503 });
      res.writeHead(503, { 'content-type': 'application/xml' });
      res.end(
        '<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>',
      );
      return;
    }
    if (fault === 'reset' || fault === 'hang') {
      proxy.requests.push({ ...seen, answered: fault });
      if (fault === 'reset') req.socket.destroy();
      else req.resume();
      return;
    }
    const { expect: _expect, ...headers } = req.headers;
    const out = request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
      (answer) => {
        proxy.requests.push({ ...seen, answered: fault ?? answer.statusCode ?? 0 });
        const sent = { ...answer.headers };
        if (fault === 'etag') sent.etag = `"${'0'.repeat(32)}"`;
        res.writeHead(answer.statusCode ?? 502, sent);
        answer.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return Object.assign(proxy, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  });
}

const dir = mkdtempSync(path.join(tmpdir(), 'daemon-upload-'));
const MiB = 1024 * 1024;
let storage: TestService;
let proxied: TestService;
let proxy: StoreProxy;
let renter: { headers: { authorization: string } };
let bucket: string;

beforeAll(async () => {
  proxy = await startStoreProxy(testEnv.s3Endpoint);
  storage = await startService();
  proxied = await startService({ objectStore: { public_endpoint: proxy.url } });
  renter = await storage.issuer.user(['renter']);
  bucket = uniqueBucket('job-output');
  const made = await storage.app.inject({ method: 'POST', url: `/buckets/${bucket}`, headers: renter.headers });
  expect(made.statusCode).toBe(201);
});
afterAll(async () => {
  await proxied?.close();
  await storage?.close();
  await proxy?.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  proxy.requests.length = 0;
  proxy.faults.length = 0;
});

/** The renter's presigned URL for `key`, from `svc`. */
async function presign(key: string, method: 'GET' | 'PUT', expiry = '10m', svc = storage): Promise<string> {
  const res = await svc.app.inject({
    method: 'POST',
    url: `/presigned-url/${bucket}/${key}`,
    headers: renter.headers,
    payload: { method, expiry },
  });
  expect(res.statusCode).toBe(200);
  return res.json().url;
}

/** What the renter reads back through storage: status, bytes and content type. */
async function download(key: string) {
  const res = await storage.app.inject({ method: 'GET', url: `/objects/${bucket}/${key}`, headers: renter.headers });
  return { status: res.statusCode, bytes: res.rawPayload, contentType: res.headers['content-type'] };
}

/** A file of `size` random bytes; its path and bytes. */
function outputFile(size: number): { file: string; bytes: Buffer } {
  const bytes = randomBytes(size);
  const file = path.join(dir, `out-${randomBytes(4).toString('hex')}.bin`);
  writeFileSync(file, bytes);
  return { file, bytes };
}

const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex');
const fast = { baseDelayMs: 50, maxDelayMs: 200 };

describe('uploading a job output through a presigned PUT URL', () => {
  it('stores the file under the renter key, and the renter reads back exactly the same bytes', async () => {
    const { file, bytes } = outputFile(12 * MiB + 123);
    const url = await presign('jobs/42/output.tar', 'PUT');
    const result = await uploadFile(file, url, { contentType: 'application/x-tar' });
    expect(result).toMatchObject({ bytes: bytes.length, md5: md5(bytes), etagChecked: true, attempts: 1 });
    expect(result.etag).toBe(md5(bytes));
    const back = await download('jobs/42/output.tar');
    expect(back.status).toBe(200);
    expect(back.contentType).toBe('application/x-tar');
    expect(back.bytes.length).toBe(bytes.length);
    expect(back.bytes.equals(bytes)).toBe(true);
  });

  it('sends one PUT with the file size as Content-Length', async () => {
    const { file, bytes } = outputFile(3 * MiB);
    await uploadFile(file, await presign('jobs/43/output.bin', 'PUT', '10m', proxied));
    expect(proxy.requests).toEqual([{ method: 'PUT', contentLength: String(bytes.length), answered: 200 }]);
    expect((await download('jobs/43/output.bin')).bytes.equals(bytes)).toBe(true);
  });

  it('refuses a presigned GET URL with the store error, once, and writes nothing', async () => {
    const { file } = outputFile(2 * MiB);
    const url = await presign('jobs/44/output.bin', 'GET', '10m', proxied);
    const err = await uploadFile(file, url, fast).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UploadError);
    expect(err).toMatchObject({ status: 403, code: 'SignatureDoesNotMatch', retryable: false });
    expect((err as Error).message).toMatch(/refused the upload: 403 SignatureDoesNotMatch/);
    expect((err as Error).message).toMatch(/presigned PUT URL/);
    expect(proxy.requests).toHaveLength(1);
    expect((await download('jobs/44/output.bin')).status).toBe(404);
  });

  it('fails on an expired URL without retrying, and writes nothing', async () => {
    const { file } = outputFile(MiB);
    const url = await presign('jobs/45/output.bin', 'PUT', '1s', proxied);
    await new Promise((r) => setTimeout(r, 2100));
    const retries: unknown[] = [];
    const err = await uploadFile(file, url, { ...fast, onRetry: (f) => retries.push(f) }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 403, code: 'AccessDenied', retryable: false });
    expect((err as Error).message).toMatch(/403 AccessDenied: Request has expired/);
    expect(retries).toEqual([]);
    expect(proxy.requests).toHaveLength(1);
    expect((await download('jobs/45/output.bin')).status).toBe(404);
  });

  it('retries a 503 of the store and succeeds', async () => {
    const { file, bytes } = outputFile(3 * MiB);
    const url = await presign('jobs/46/output.bin', 'PUT', '10m', proxied);
    proxy.faults.push('503');
    const retries: { attempt: number; error: UploadError }[] = [];
    const result = await uploadFile(file, url, { ...fast, onRetry: (f) => retries.push(f) });
    expect(result).toMatchObject({ attempts: 2, etagChecked: true, md5: md5(bytes) });
    expect(retries).toHaveLength(1);
    expect(retries[0]?.error).toMatchObject({ status: 503, code: 'SlowDown' });
    expect(proxy.requests.map((r) => r.answered)).toEqual([503, 200]);
    expect((await download('jobs/46/output.bin')).bytes.equals(bytes)).toBe(true);
  });

  it('retries a cut connection and a store that does not answer in time', async () => {
    const { file, bytes } = outputFile(2 * MiB);
    const url = await presign('jobs/47/output.bin', 'PUT', '10m', proxied);
    proxy.faults.push('reset', 'hang');
    const result = await uploadFile(file, url, { ...fast, timeoutMs: 1000 });
    expect(result.attempts).toBe(3);
    expect(proxy.requests.map((r) => r.answered)).toEqual(['reset', 'hang', 200]);
    expect((await download('jobs/47/output.bin')).bytes.equals(bytes)).toBe(true);
  });

  it('gives up after its attempts, naming the last answer', async () => {
    const { file } = outputFile(MiB);
    const url = await presign('jobs/48/output.bin', 'PUT', '10m', proxied);
    proxy.faults.push('503', '503', '503');
    const err = await uploadFile(file, url, { ...fast, attempts: 3 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503, retryable: true });
    expect((err as Error).message).toMatch(/503 SlowDown.*gave up after 3 attempts/);
    expect(proxy.requests).toHaveLength(3);
  });

  it('fails when the ETag of the answer is not the MD5 of the bytes sent', async () => {
    const { file } = outputFile(MiB);
    const url = await presign('jobs/49/output.bin', 'PUT', '10m', proxied);
    proxy.faults.push('etag');
    const err = await uploadFile(file, url, fast).catch((e: unknown) => e);
    expect(err).toMatchObject({ retryable: false });
    expect((err as Error).message).toMatch(/ETag 0{32} is not the MD5 of the bytes sent/);
    expect(proxy.requests).toHaveLength(1);
  });

  it('leaves the ETag unchecked when told (stores whose ETags are not MD5s)', async () => {
    const { file, bytes } = outputFile(MiB);
    const url = await presign('jobs/53/output.bin', 'PUT', '10m', proxied);
    proxy.faults.push('etag');
    const result = await uploadFile(file, url, { ...fast, checkEtag: false });
    expect(result).toMatchObject({ etag: '0'.repeat(32), etagChecked: false, md5: md5(bytes), attempts: 1 });
    expect((await download('jobs/53/output.bin')).bytes.equals(bytes)).toBe(true);
  });

  it('refuses a file over 5 GiB before sending anything', async () => {
    const file = path.join(dir, 'huge.bin');
    writeFileSync(file, '');
    truncateSync(file, MAX_SINGLE_PUT_BYTES + 1); // sparse: takes no disk
    const url = await presign('jobs/50/output.bin', 'PUT', '10m', proxied);
    await expect(uploadFile(file, url)).rejects.toThrow(/5368709121 bytes: a single PUT takes at most 5368709120/);
    expect(proxy.requests).toHaveLength(0);
  });
});

describe('pnpm --filter @gpu/provider-daemon upload', () => {
  const root = path.resolve(import.meta.dirname, '../../..');
  /** Runs the command with `args`, the environment's UPLOAD_URL set to `env.url` (unset by default), `stdin`. */
  const run = (args: string[], opts: { uploadUrl?: string; stdin?: string } = {}) => {
    const { UPLOAD_URL: _unset, ...env } = process.env;
    const running = promisify(execFile)('pnpm', ['--silent', '--filter', '@gpu/provider-daemon', 'upload', ...args], {
      cwd: root,
      env: opts.uploadUrl === undefined ? env : { ...env, UPLOAD_URL: opts.uploadUrl },
    });
    running.child.stdin?.end(opts.stdin ?? '');
    return running.then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
  };

  it('uploads a file named relative to where it is run and prints what was stored', async () => {
    const { file, bytes } = outputFile(MiB);
    const url = await presign('jobs/51/output.bin', 'PUT');
    const { code, stdout } = await run([path.relative(root, file), url]);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({ bytes: bytes.length, md5: md5(bytes), attempts: 1 });
    expect((await download('jobs/51/output.bin')).bytes.equals(bytes)).toBe(true);
  });

  it('takes the URL from UPLOAD_URL or, for `-`, from stdin, so that it is not on the command line', async () => {
    const fromEnv = outputFile(1000);
    const envUrl = await presign('jobs/54/output.bin', 'PUT');
    const viaEnv = await run([fromEnv.file], { uploadUrl: envUrl });
    expect(viaEnv).toMatchObject({ code: 0 });
    expect(JSON.parse(viaEnv.stdout)).toMatchObject({ bytes: 1000, md5: md5(fromEnv.bytes) });
    expect((await download('jobs/54/output.bin')).bytes.equals(fromEnv.bytes)).toBe(true);

    const fromStdin = outputFile(2000);
    const stdinUrl = await presign('jobs/55/output.bin', 'PUT');
    const viaStdin = await run([fromStdin.file, '-'], { stdin: `${stdinUrl}\n` });
    expect(viaStdin).toMatchObject({ code: 0 });
    expect(JSON.parse(viaStdin.stdout)).toMatchObject({ bytes: 2000, md5: md5(fromStdin.bytes) });
    expect((await download('jobs/55/output.bin')).bytes.equals(fromStdin.bytes)).toBe(true);

    const none = await run([fromStdin.file]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no presigned URL: set UPLOAD_URL/);
  });

  it('exits 1 with the error when the store refuses', async () => {
    const { file } = outputFile(1000);
    const url = await presign('jobs/52/output.bin', 'GET');
    const { code, stderr } = await run([file, url]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/upload failed: the store refused the upload: 403 SignatureDoesNotMatch/);
    expect((await download('jobs/52/output.bin')).status).toBe(404);
  });
});
