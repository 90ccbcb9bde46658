/**
 * Uploads cut short never reach the store: an upload is stored only when every byte it declared (or its chunked
 * body's last chunk) arrived. A client that half-closes mid-body gets 400 INCOMPLETE_BODY, one that stalls 408
 * CLIENT_TIMEOUT (or, past the transfer's time limit, 503 REQUEST_TIMEOUT), one that vanishes nothing; in every case
 * the object stored earlier under the key stays byte for byte with its ETag, and no multipart upload is left behind.
 *
 * Told with a raw TCP socket (an HTTP client would not send a short body), through the storage service to both
 * stores the platform runs on this machine: the tests' S3 server (scripts/test-env.sh) and the embedded store of
 * `pnpm start` (the compiled scripts/dev/s3-server.ts, started here as pnpm start starts it). Presigned PUTs go to the
 * store directly, so a cut one is tried against each store too.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ListMultipartUploadsCommand, type S3Client } from '@aws-sdk/client-s3';
import { freePort, gatherOutput, testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledPath, ensureBuilt } from '../../../scripts/lib/build.ts';
import { repoRoot } from '../../../scripts/lib/platform.ts';
import { startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

const MiB = 1024 * 1024;
/** A small part size, so that a few MiB make a multipart upload. */
const PART = 5 * MiB;

type Ending = 'half-close' | 'connection destroyed' | 'stall';

interface RawAnswer {
  status?: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends a PUT's headers and `bytes` of its body on a raw socket (with a Content-Length of `declared`, or chunked when
 * it is undefined), then ends as told: half-closes and reads the answer, destroys the connection, or stalls and
 * reads whatever answer comes.
 */
function cutUpload(
  url: string,
  opts: { declared?: number; bytes: Buffer; ending: Ending; headers?: Record<string, string> },
): Promise<RawAnswer> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(target.port), target.hostname);
    const received: Buffer[] = [];
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('error', () => {});
    const safety = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to the ${opts.ending} upload within 20 s`));
    }, 20_000);
    socket.on('close', () => {
      clearTimeout(safety);
      const text = Buffer.concat(received).toString('utf8');
      const [head = '', body = ''] = text.split('\r\n\r\n', 2);
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const at = line.indexOf(':');
        if (at > 0) headers[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim();
      }
      const status = Number(statusLine.split(' ')[1]);
      resolve({ status: Number.isFinite(status) && status > 0 ? status : undefined, headers, body });
    });
    const framing =
      opts.declared === undefined ? 'transfer-encoding: chunked\r\n' : `content-length: ${opts.declared}\r\n`;
    const extra = Object.entries(opts.headers ?? {})
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.write(
      `PUT ${target.pathname}${target.search} HTTP/1.1\r\nhost: ${target.host}\r\n` +
        `content-type: application/octet-stream\r\n${framing}${extra}\r\n`,
    );
    const body =
      opts.declared === undefined
        ? Buffer.concat([Buffer.from(`${opts.bytes.length.toString(16)}\r\n`), opts.bytes, Buffer.from('\r\n')])
        : opts.bytes;
    // Once the bytes are on their way (and a moment for the store's upload to start), end as told.
    socket.write(body, () => {
      setTimeout(() => {
        if (opts.ending === 'half-close') socket.end();
        else if (opts.ending === 'connection destroyed') socket.destroy();
      }, 300);
    });
  });
}

/** Deterministic bytes that differ from one upload to the next. */
function bytesOf(size: number, seed: number): Buffer {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4) b.writeUInt32LE(((i + 1) * 2654435761 + seed * 40503) >>> 0, Math.min(i, size - 4));
  return b;
}

/** The embedded store as `pnpm start` runs it: the compiled s3-server.ts, with OpenSSL's legacy provider. */
async function startEmbeddedStore(): Promise<{ endpoint: string; stop(): Promise<void> }> {
  const entry = 'scripts/dev/s3-server.ts';
  const dir = await mkdtemp(path.join(tmpdir(), 'embedded-s3-'));
  await ensureBuilt([entry], path.join(dir, 'build-info.json'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    ['--openssl-legacy-provider', compiledPath(entry), '--port', String(port), '--dir', path.join(dir, 's3')],
    { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output = gatherOutput(child);
  const deadline = Date.now() + 30_000;
  while (!output().includes('listening')) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`embedded store did not start:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    endpoint: `http://127.0.0.1:${port}`,
    async stop() {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const stores = [
  { name: "the tests' S3 server", start: async () => ({ endpoint: testEnv.s3Endpoint, stop: async () => {} }) },
  { name: 'the embedded store of pnpm start', start: startEmbeddedStore },
];

interface Size {
  size: string;
  /** The Content-Length, or undefined for a chunked body. */
  declared: number | undefined;
  /** Bytes sent before the body is cut short. */
  send: number;
}
const small: Size = { size: 'small, with a Content-Length', declared: 1000, send: 16 };
const multipart: Size = { size: 'multipart, with a Content-Length', declared: 6 * MiB, send: PART + MiB / 2 };
const smallChunked: Size = { size: 'small, chunked', declared: undefined, send: 16 };
const multipartChunked: Size = { size: 'multipart, chunked', declared: undefined, send: PART + MiB / 2 };
const sizes = [small, multipart, smallChunked, multipartChunked];
const endings: Ending[] = ['half-close', 'connection destroyed', 'stall'];

describe.each(stores)('uploads cut short, on $name', ({ start }) => {
  let store: { endpoint: string; stop(): Promise<void> };
  let svc: TestService;
  /** With no idle limit and a transfer limit of 1 s. */
  let slow: TestService;
  let s3: S3Client;
  let bucket: string;
  let seed = 0;

  beforeAll(async () => {
    store = await start();
    const objectStore = { endpoint: store.endpoint, part_size: PART };
    svc = await startService({ listen: true, objectStore: { ...objectStore, upload_idle_timeout: '1s' } });
    slow = await startService({
      listen: true,
      objectStore: { ...objectStore, upload_idle_timeout: '0s', transfer_timeout: '1s' },
    });
    bucket = uniqueBucket('cut');
    await svc.store.ensureBucket(bucket);
    s3 = storeClient(store.endpoint);
  });
  afterAll(async () => {
    s3?.destroy();
    await svc?.close();
    await slow?.close();
    await store?.stop();
  });

  /** The multipart uploads still open in a bucket, once those being aborted are gone (30 s at most). */
  async function openUploads(name: string): Promise<number> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const out = await s3.send(new ListMultipartUploadsCommand({ Bucket: name }));
      const open = out.Uploads?.length ?? 0;
      if (open === 0 || Date.now() > deadline) return open;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Uploads a complete object through the service: its bytes and ETag. */
  async function original(service: TestService, url: string): Promise<{ bytes: Buffer; etag: string }> {
    const bytes = bytesOf(2048, ++seed);
    const res = await fetch(url, { method: 'PUT', body: bytes, headers: service.auth });
    expect(res.status).toBe(201);
    return { bytes, etag: ((await res.json()) as { etag: string }).etag };
  }

  /** The object is still the original: the same bytes and ETag through the service. */
  async function expectUnchanged(service: TestService, url: string, kept: { bytes: Buffer; etag: string }) {
    const res = await fetch(url, { headers: service.auth });
    expect(res.status).toBe(200);
    expect(res.headers.get('etag')).toBe(kept.etag);
    expect(Buffer.from(await res.arrayBuffer()).equals(kept.bytes)).toBe(true);
  }

  /** What each ending is answered with: nothing for a vanished client. */
  function expectAnswer(answer: RawAnswer, ending: Ending) {
    if (ending === 'connection destroyed') return;
    const expected = ending === 'half-close' ? [400, 'INCOMPLETE_BODY'] : [408, 'CLIENT_TIMEOUT'];
    expect(answer.status, answer.body).toBe(expected[0]);
    expect(answer.headers['content-type']).toContain('application/problem+json');
    expect(answer.headers.connection).toBe('close');
    expect(JSON.parse(answer.body)).toMatchObject({ status: expected[0], code: expected[1] });
  }

  const grid = sizes.flatMap((size) => endings.map((ending) => ({ ...size, ending })));

  it.each(grid)('bucket-named route, $size, $ending: the earlier object stays', async ({ declared, send, ending }) => {
    const url = `${svc.url}/objects/${bucket}/data/${seed}-${ending.replace(/ /g, '-')}.bin`;
    const kept = await original(svc, url);
    const answer = await cutUpload(url, { declared, bytes: bytesOf(send, ++seed), ending, headers: svc.auth });
    expectAnswer(answer, ending);
    expect(await openUploads(bucket)).toBe(0);
    await expectUnchanged(svc, url, kept);
  });

  it.each([
    ...endings.map((ending) => ({ ...small, ending })),
    { ...multipart, ending: 'half-close' as const },
    { ...multipartChunked, ending: 'stall' as const },
  ])('default-bucket route, $size, $ending: the earlier object stays', async ({ declared, send, ending }) => {
    const url = `${svc.url}/objects/default-${seed}-${ending.replace(/ /g, '-')}.bin`;
    const kept = await original(svc, url);
    const answer = await cutUpload(url, { declared, bytes: bytesOf(send, ++seed), ending, headers: svc.auth });
    expectAnswer(answer, ending);
    expect(await openUploads(svc.config.object_store.default_bucket)).toBe(0);
    await expectUnchanged(svc, url, kept);
  });

  it.each([small, multipart])(
    'a stalled upload ($size) past the transfer time limit: 503 REQUEST_TIMEOUT, the earlier object stays',
    async ({ declared, send }) => {
      // The earlier object is written and read through the other instance: the slow one's 1 s limit is for the
      // stall alone, not for a busy host's ordinary requests.
      const path = `/objects/${bucket}/slow/${seed}.bin`;
      const kept = await original(svc, `${svc.url}${path}`);
      const answer = await cutUpload(`${slow.url}${path}`, {
        declared,
        bytes: bytesOf(send, ++seed),
        ending: 'stall',
        headers: slow.auth,
      });
      expect(answer.status, answer.body).toBe(503);
      expect(JSON.parse(answer.body)).toMatchObject({ code: 'REQUEST_TIMEOUT' });
      expect(answer.headers.connection).toBe('close');
      expect(await openUploads(bucket)).toBe(0);
      await expectUnchanged(svc, `${svc.url}${path}`, kept);
    },
  );

  it.each(['half-close', 'connection destroyed'] as const)(
    'a presigned PUT straight to the store, cut short (%s): the earlier object stays',
    async (ending) => {
      const key = `presigned/${++seed}.bin`;
      const url = `${svc.url}/objects/${bucket}/${key}`;
      const kept = await original(svc, url);
      const presign = await fetch(`${svc.url}/presigned-url/${bucket}/${key}`, {
        method: 'POST',
        headers: { ...svc.auth, 'content-type': 'application/json' },
        body: JSON.stringify({ method: 'PUT' }),
      });
      expect(presign.status).toBe(200);
      const { url: putUrl } = (await presign.json()) as { url: string };
      await cutUpload(putUrl, { declared: 1000, bytes: bytesOf(16, ++seed), ending });
      await new Promise((r) => setTimeout(r, 300));
      await expectUnchanged(svc, url, kept);
    },
  );
});
