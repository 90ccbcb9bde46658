/**
 * The embedded S3 store (`scripts/dev/s3-server.ts`: s3rver with AWS Signature Version 4 checked in front of it,
 * `scripts/dev/s3rver-sigv4.ts`), as `pnpm start` and the tests run it, refuses what S3 refuses: unsigned requests,
 * a presigned URL used with another method, an expired or tampered one, a wrong secret, a stale signed date. Checked
 * with plain curl (its own SigV4 signing, `--aws-sigv4`, and presigned URLs as a user would use them) and with the
 * AWS SDK as the storage service uses it.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { testEnv } from '@gpu/common/testing';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sha256 } from '../scripts/dev/s3rver-sigv4.ts';
import { S3ObjectStore } from '../services/storage/src/adapters/object-store.ts';
import { testConfig, uniqueBucket } from '../services/storage/test/helpers.ts';

const run = promisify(execFile);
const endpoint = testEnv.s3Endpoint.includes('://') ? testEnv.s3Endpoint : `http://${testEnv.s3Endpoint}`;
const settings = testConfig().object_store;
const store = new S3ObjectStore(settings);
const bucket = uniqueBucket('sigv4');
let dir: string;

/** curl with the given arguments: the HTTP status and the body. */
async function curl(args: string[]): Promise<{ status: number; body: string }> {
  const out = path.join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const { stdout } = await run('curl', ['-s', '-o', out, '-w', '%{http_code}', ...args]);
  const body = await readFile(out, 'utf8').catch(() => '');
  return { status: Number(stdout), body };
}

/** curl's own SigV4 signing (S3 wants the payload hash header, which curl 7.x does not add itself). */
const signedBy = (secret: string) => [
  '--aws-sigv4',
  'aws:amz:us-east-1:s3',
  '--user',
  `${settings.access_key_id}:${secret}`,
  '-H',
  'x-amz-content-sha256: UNSIGNED-PAYLOAD',
];

const objectUrl = (key: string) => `${endpoint}/${bucket}/${key}`;

async function put(key: string, text: string) {
  const body = Readable.from([Buffer.from(text)]);
  await store.upload({ bucket, key, body, contentType: 'text/plain', contentLength: Buffer.byteLength(text) });
}

async function text(key: string): Promise<string> {
  const obj = await store.get(bucket, key, {});
  const chunks: Buffer[] = [];
  for await (const chunk of obj.body) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sigv4-'));
  await store.ensureBucket(bucket);
  await put('kept.txt', 'original');
});
afterAll(() => store.close());

describe('the embedded S3 store: unsigned requests', () => {
  it('refuses an unsigned GET, PUT, DELETE and listing with 403 AccessDenied', async () => {
    const get = await curl([objectUrl('kept.txt')]);
    expect(get.status).toBe(403);
    expect(get.body).toContain('<Code>AccessDenied</Code>');
    const file = path.join(dir, 'new.txt');
    await writeFile(file, 'overwritten');
    expect((await curl(['-X', 'PUT', '--upload-file', file, objectUrl('kept.txt')])).status).toBe(403);
    expect((await curl(['-X', 'DELETE', objectUrl('kept.txt')])).status).toBe(403);
    expect((await curl([`${endpoint}/${bucket}?list-type=2`])).status).toBe(403);
    expect(await text('kept.txt')).toBe('original');
  });

  it('answers a CORS preflight (OPTIONS) without a signature, as S3 does', async () => {
    const res = await curl([
      '-X',
      'OPTIONS',
      '-H',
      'Origin: http://example.com',
      '-H',
      'Access-Control-Request-Method: GET',
      objectUrl('kept.txt'),
    ]);
    // No CORS rules on the bucket: S3's own refusal of the preflight, not a demand for a signature.
    expect(res.body).toContain('CORS');
    expect(res.body).not.toContain('AccessDenied');
  });
});

describe('the embedded S3 store: header-signed requests', () => {
  it("serves curl's own SigV4 signing with the right secret", async () => {
    const res = await curl([...signedBy(settings.secret_access_key), objectUrl('kept.txt')]);
    expect(res).toEqual({ status: 200, body: 'original' });
    const listing = await curl([...signedBy(settings.secret_access_key), `${endpoint}/${bucket}?list-type=2`]);
    expect(listing.status).toBe(200);
    expect(listing.body).toContain('<Key>kept.txt</Key>');
  });

  it('refuses a signature made with the wrong secret (403 SignatureDoesNotMatch)', async () => {
    const res = await curl([...signedBy('not-the-secret'), objectUrl('kept.txt')]);
    expect(res.status).toBe(403);
    expect(res.body).toContain('<Code>SignatureDoesNotMatch</Code>');
    const file = path.join(dir, 'evil.txt');
    await writeFile(file, 'evil');
    expect((await curl([...signedBy('not-the-secret'), '-T', file, objectUrl('kept.txt')])).status).toBe(403);
    expect(await text('kept.txt')).toBe('original');
  });

  it('refuses a request signed with a date more than 15 minutes off (403 RequestTimeTooSkewed)', async () => {
    const signer = new SignatureV4({
      service: 's3',
      region: 'us-east-1',
      credentials: { accessKeyId: settings.access_key_id, secretAccessKey: settings.secret_access_key },
      sha256: Sha256,
      uriEscapePath: false,
    });
    const url = new URL(objectUrl('kept.txt'));
    const signedAt = async (signingDate: Date) => {
      const signed = await signer.sign(
        {
          method: 'GET',
          protocol: 'http:',
          hostname: url.hostname,
          port: Number(url.port),
          path: url.pathname,
          query: {},
          headers: { host: url.host, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' },
        },
        { signingDate },
      );
      return fetch(url, { headers: signed.headers });
    };
    expect((await signedAt(new Date())).status).toBe(200);
    const stale = await signedAt(new Date(Date.now() - 60 * 60 * 1000));
    expect(stale.status).toBe(403);
    expect(await stale.text()).toContain('<Code>RequestTimeTooSkewed</Code>');
  });

  it("serves the storage service's SDK operations: upload, read, list, delete", async () => {
    await put('sdk/one.txt', 'one');
    expect(await text('sdk/one.txt')).toBe('one');
    expect((await store.head(bucket, 'sdk/one.txt', {})).contentLength).toBe(3);
    const page = await store.listPage({ bucket, prefix: 'sdk/', oneLevel: false, maxKeys: 10 });
    expect(page.objects.map((o) => o.key)).toEqual(['sdk/one.txt']);
    await store.delete(bucket, 'sdk/one.txt');
    await expect(store.head(bucket, 'sdk/one.txt', {})).rejects.toMatchObject({ code: 'OBJECT_NOT_FOUND' });
  });
});

describe('the embedded S3 store: conditional deletes and writes, as S3 makes them', () => {
  it('deletes with If-Match only the object of that ETag (or any, `*`); none there is NoSuchKey', async () => {
    await put('cond/a.txt', 'first');
    const first = (await store.head(bucket, 'cond/a.txt', {})).etag!;
    await put('cond/a.txt', 'second');
    await expect(store.delete(bucket, 'cond/a.txt', { ifMatch: first })).rejects.toMatchObject({
      code: 'PRECONDITION_FAILED',
    });
    expect(await text('cond/a.txt')).toBe('second');
    const second = (await store.head(bucket, 'cond/a.txt', {})).etag!;
    await store.delete(bucket, 'cond/a.txt', { ifMatch: second });
    await expect(store.head(bucket, 'cond/a.txt', {})).rejects.toMatchObject({ code: 'OBJECT_NOT_FOUND' });
    await expect(store.delete(bucket, 'cond/a.txt', { ifMatch: second })).rejects.toMatchObject({
      code: 'OBJECT_NOT_FOUND',
    });
    await put('cond/b.txt', 'any');
    await store.delete(bucket, 'cond/b.txt', { ifMatch: '*' });
    await expect(store.head(bucket, 'cond/b.txt', {})).rejects.toMatchObject({ code: 'OBJECT_NOT_FOUND' });
  });

  it('writes with If-None-Match: * only where no object is: of two such writes at once, one holds', async () => {
    const once = (value: string) => {
      const body = Buffer.from(value);
      return store
        .upload({
          bucket,
          key: 'cond/claim.json',
          body,
          contentType: 'application/json',
          contentLength: body.length,
          ifNoneMatch: '*',
        })
        .then(
          () => 'stored',
          (err: { code?: string }) => err.code,
        );
    };
    const outcomes = await Promise.all([once('"one"'), once('"two"')]);
    expect(outcomes.toSorted()).toEqual(['PRECONDITION_FAILED', 'stored']);
    const held = await text('cond/claim.json');
    expect(await once('"three"')).toBe('PRECONDITION_FAILED');
    expect(await text('cond/claim.json')).toBe(held);
  });
});

describe('the embedded S3 store: presigned URLs', () => {
  it('downloads with a presigned GET URL', async () => {
    const url = await store.presign(bucket, 'kept.txt', 'GET', 60);
    expect(await curl([url])).toEqual({ status: 200, body: 'original' });
  });

  it('refuses a presigned GET URL used with PUT, DELETE or HEAD, leaving the object as it was', async () => {
    const url = await store.presign(bucket, 'kept.txt', 'GET', 60);
    const file = path.join(dir, 'over.txt');
    await writeFile(file, 'overwritten');
    const overwrite = await curl(['-X', 'PUT', '--upload-file', file, url]);
    expect(overwrite.status).toBe(403);
    expect(overwrite.body).toContain('<Code>SignatureDoesNotMatch</Code>');
    expect((await curl(['-X', 'DELETE', url])).status).toBe(403);
    expect((await curl(['-I', url])).status).toBe(403);
    expect(await text('kept.txt')).toBe('original');
  });

  it('uploads with a presigned PUT URL, which does not read', async () => {
    const url = await store.presign(bucket, 'uploaded.txt', 'PUT', 60);
    const file = path.join(dir, 'up.txt');
    await writeFile(file, 'uploaded');
    expect((await curl(['-X', 'PUT', '--upload-file', file, url])).status).toBe(200);
    expect((await curl([url])).status).toBe(403);
    expect(await text('uploaded.txt')).toBe('uploaded');
  });

  it('refuses an expired presigned URL (403 AccessDenied)', async () => {
    const url = await store.presign(bucket, 'kept.txt', 'GET', 1);
    await new Promise((r) => setTimeout(r, 2100));
    const res = await curl([url]);
    expect(res.status).toBe(403);
    expect(res.body).toContain('Request has expired');
  });

  it('refuses a tampered URL: its signature, key or expiry changed, or a parameter added (403)', async () => {
    const url = await store.presign(bucket, 'kept.txt', 'GET', 60);
    const signature = new URL(url).searchParams.get('X-Amz-Signature')!;
    const flipped = signature.slice(0, -1) + (signature.endsWith('0') ? '1' : '0');
    const tampered = [
      url.replace(signature, flipped),
      url.replace('/kept.txt?', '/uploaded.txt?'),
      url.replace('X-Amz-Expires=60', 'X-Amz-Expires=600'),
      `${url}&extra=1`,
    ];
    for (const t of tampered) {
      const res = await curl([t]);
      expect(res.status, t).toBe(403);
      expect(res.body, t).toContain('<Code>SignatureDoesNotMatch</Code>');
    }
  });
});
