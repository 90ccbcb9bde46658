/**
 * `gpu storage cp|rm` run as a person runs them (a child process) against the real auth and storage services (on the
 * tests' S3 server) behind the platform's gateway, through a proxy that shows what was asked and can stall or cut an
 * answer (support/fault-proxy.ts): paths as `cp` and `aws s3 cp` read them, folders copied both ways with their
 * transfers side by side, a prefix removed, local failures said as local, a download written whole or not at all and
 * resumed with `Range`.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerAndLogin, testConfig, useAuth } from '../../../services/auth/test/helpers.ts';
import { startService, type TestService } from '../../../services/storage/test/helpers.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { type FaultProxy, faultProxy, type Seen } from './support/fault-proxy.ts';
import { CLI_TEST_MS, type Gpu, type GpuResult, gpuAt, gpuCommandLine, root } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const run = promisify(execFile);
const auth = useAuth(testConfig({ jwt: { algorithm: 'EdDSA' } }));
const dir = mkdtempSync(join(tmpdir(), 'gpu-storage-'));
const configDir = join(dir, 'config');
let storage: TestService;
let gateway: Awaited<ReturnType<typeof buildGateway>>;
let proxy: FaultProxy;
let gpu: Gpu;
/** The user's access token, for a change made here rather than by a `gpu` run. */
let token: string;

beforeAll(async () => {
  const authUrl = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  storage = await startService({
    listen: true,
    settings: {
      access: {
        jwks_url: `${authUrl}/.well-known/jwks.json`,
        issuer: auth.config.jwt.issuer,
        audience: auth.config.jwt.audience,
      },
    },
  });
  // The commands here speak to auth and storage alone.
  const nowhere = 'http://127.0.0.1:9';
  gateway = await buildGateway({
    upstreams: { auth: authUrl, storage: storage.url, 'provider-registry': nowhere, billing: nowhere },
    logLevel: 'silent',
  });
  proxy = await faultProxy(await gateway.listen({ host: '127.0.0.1', port: 0 }));
  const { email, password, tokens } = await registerAndLogin(auth.app, { roles: ['renter'] });
  token = tokens.access_token;
  gpu = gpuAt(proxy.url, configDir);
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login.code, login.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  await proxy?.close();
  await gateway?.close();
  await storage?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** What a run that succeeded printed, as JSON. */
function answer(r: GpuResult) {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

/** The keys under a prefix, as `gpu storage ls` lists them. */
async function keysUnder(prefix: string): Promise<string[]> {
  return answer(await gpu(['storage', 'ls', `gpu:${prefix}`, '--json'])).map((o: { key: string }) => o.key);
}

/** Resolves once the user's unfinished upload to `key` holds parts `numbers` (30 s at most, then rejects). */
async function partsStored(key: string, numbers: number[]): Promise<void> {
  const get = async (path: string) =>
    (await fetch(`${storage.url}${path}`, { headers: { authorization: `Bearer ${token}` } })).json();
  const deadline = Date.now() + 30_000;
  for (;;) {
    const upload = ((await get('/uploads')) as { upload_id: string; key: string }[]).find((u) => u.key === key);
    const parts = upload ? ((await get(`/uploads/${upload.upload_id}`)) as { parts: { part_number: number }[] }) : null;
    const have = new Set(parts?.parts.map((p) => p.part_number));
    if (numbers.every((n) => have.has(n))) return;
    if (Date.now() > deadline) throw new Error(`parts ${numbers} of ${key} not stored in 30 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A fresh local folder of this file's. */
function folder(name: string): string {
  const made = join(dir, name);
  mkdirSync(made, { recursive: true });
  return made;
}

/** `gpu args` on a terminal (`script` gives it one, standard error included): what it showed there. */
async function onTerminal(args: string[]): Promise<string> {
  const line = gpuCommandLine(args)
    .map((a) => `'${a}'`)
    .join(' ');
  const env = { ...process.env, GPU_URL: proxy.url, GPU_CONFIG_DIR: configDir };
  return (await run('script', ['-qec', line, '/dev/null'], { cwd: root, env })).stdout;
}

/** A request for an object's bytes (not a listing). */
const objectGet = (r: Seen) =>
  r.method === 'GET' && r.url.startsWith('/objects/') && !r.url.startsWith('/objects/list');

describe('gpu storage cp and rm', () => {
  it('copies into a folder, remote or local, under the source’s name, as cp and aws s3 cp do', async () => {
    const here = folder('names');
    const file = join(here, 'notes.txt');
    writeFileSync(file, 'step,loss\n');
    expect(answer(await gpu(['storage', 'cp', file, 'gpu:docs/', '--json']))).toMatchObject({
      key: 'docs/notes.txt',
      size: 10,
    });
    expect(answer(await gpu(['storage', 'cp', file, 'gpu:', '--json']))).toMatchObject({ key: 'notes.txt' });
    expect(answer(await gpu(['storage', 'cp', file, 'gpu:docs/renamed.txt', '--json']))).toMatchObject({
      key: 'docs/renamed.txt',
    });
    expect(await keysUnder('docs/')).toEqual(['docs/notes.txt', 'docs/renamed.txt']);

    // Down into a directory that exists, one named with a trailing / that does not yet, and to a file name.
    const into = folder('into');
    const down = await gpu(['storage', 'cp', 'gpu:docs/notes.txt', into]);
    expect(down.code, down.stderr).toBe(0);
    expect(down.stderr).toBe(`gpu:docs/notes.txt -> ${join(into, 'notes.txt')} (10 bytes)\n`);
    expect(readFileSync(join(into, 'notes.txt'), 'utf8')).toBe('step,loss\n');
    const made = join(dir, 'made', 'here');
    expect((await gpu(['storage', 'cp', 'gpu:docs/notes.txt', `${made}/`])).code).toBe(0);
    expect(readFileSync(join(made, 'notes.txt'), 'utf8')).toBe('step,loss\n');
    const named = join(into, 'other.txt');
    expect(answer(await gpu(['storage', 'cp', 'gpu:docs/renamed.txt', named, '--json']))).toEqual({
      key: 'docs/renamed.txt',
      file: named,
      size: 10,
    });
    // Nothing but the files: no temporary file left beside them.
    expect(readdirSync(into).sort()).toEqual(['notes.txt', 'other.txt']);

    // A folder needs -r, either way.
    const remoteFolder = await gpu(['storage', 'cp', 'gpu:docs/', into]);
    expect(remoteFolder).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('gpu:docs/ is a folder: copy it with -r'),
    });
    const named2 = await gpu(['storage', 'cp', 'gpu:docs', into]);
    expect(named2).toMatchObject({ code: 2, stderr: expect.stringContaining('gpu:docs is a folder: copy it with -r') });
    const localFolder = await gpu(['storage', 'cp', into, 'gpu:docs/']);
    expect(localFolder).toMatchObject({ code: 2, stderr: `gpu: ${into} is a directory: copy a folder with -r\n` });
    // Standard input up (as aws s3 cp -), under the name given; a folder or -r has no name for it.
    const piped = await gpu(['storage', 'cp', '-', 'gpu:docs/piped.txt', '--json'], { input: 'from a pipe\n' });
    expect(piped.code, piped.stderr).toBe(0);
    expect(answer(piped)).toMatchObject({ key: 'docs/piped.txt', size: 12 });
    expect((await gpu(['storage', 'cp', 'gpu:docs/piped.txt', '-'])).stdout).toBe('from a pipe\n');
    for (const args of [
      ['-', 'gpu:docs/'],
      ['-r', '-', 'gpu:docs/x'],
    ]) {
      expect(await gpu(['storage', 'cp', ...args], { input: 'x' }), args.join(' ')).toMatchObject({
        code: 2,
        stdout: '',
      });
    }
    // A key has no leading / (as scp would name an absolute path): said, nothing sent.
    const absolute = await gpu(['storage', 'cp', join(into, 'notes.txt'), 'gpu:/docs/x.txt']);
    expect(absolute).toMatchObject({ code: 2, stderr: expect.stringContaining('no leading / (gpu:docs/x.txt)') });
  });

  it('copies a folder up and down with -r, its files side by side (4 at once) under one progress bar', async () => {
    const data = folder('data');
    const files: Record<string, Buffer> = {
      'a.txt': Buffer.from('alpha\n'),
      'b.bin': randomBytes(1024 * 1024),
      'sub/c.bin': randomBytes(512 * 1024),
      'sub/d.txt': Buffer.from('delta\n'),
      'sub/deeper/e.bin': randomBytes(1024 * 1024),
      'sub/deeper/f.txt': Buffer.from(''),
    };
    for (const [name, bytes] of Object.entries(files)) {
      mkdirSync(join(data, name, '..'), { recursive: true });
      writeFileSync(join(data, name), bytes);
    }
    const names = Object.keys(files).sort();
    const put = (r: Seen) => r.method === 'PUT' && r.url.startsWith('/objects/');
    const sendGate = proxy.gate(put, 4);
    const up = answer(await gpu(['storage', 'cp', '-r', data, 'gpu:sets/', '--json']));
    sendGate.end();
    expect(sendGate.most()).toBe(4);
    // As `aws s3 cp --recursive`: the destination is the copy, with a trailing / or without.
    expect(up.map((o: { key: string }) => o.key)).toEqual(names.map((n) => `sets/${n}`));
    expect(await keysUnder('sets/')).toEqual(names.map((n) => `sets/${n}`));
    expect((await gpu(['storage', 'cp', '-r', data, 'gpu:copy'])).code).toBe(0);
    expect(await keysUnder('copy/')).toEqual(names.map((n) => `copy/${n}`));

    // Down, the same: the local folder is the copy, made when not there.
    const fetchGate = proxy.gate(objectGet, 4);
    const out = join(dir, 'out');
    const down = await gpu(['storage', 'cp', '-r', 'gpu:sets/', out]);
    fetchGate.end();
    expect(down.code, down.stderr).toBe(0);
    expect(fetchGate.most()).toBe(4);
    expect(down.stderr).toContain(`gpu:sets/ -> ${out} (6 files, ${2.5 * 1024 * 1024 + 12} bytes)`);
    for (const [name, bytes] of Object.entries(files)) expect(readFileSync(join(out, name)).equals(bytes)).toBe(true);
    // Into a folder that is there (as a copy run again after an interruption finds it): the same files, not nested
    // under the prefix's name.
    const again = await gpu(['storage', 'cp', '-r', 'gpu:sets/', out]);
    expect(again.code, again.stderr).toBe(0);
    expect(readdirSync(out).sort()).toEqual(['a.txt', 'b.bin', 'sub']);
    const into = folder('into-existing');
    expect((await gpu(['storage', 'cp', '-r', 'gpu:copy', into])).code).toBe(0);
    for (const [name, bytes] of Object.entries(files)) expect(readFileSync(join(into, name)).equals(bytes)).toBe(true);
    // Up again into the same prefix: the same keys.
    expect((await gpu(['storage', 'cp', '-r', data, 'gpu:copy/'])).code).toBe(0);
    expect(await keysUnder('copy/')).toEqual(names.map((n) => `copy/${n}`));

    // On a terminal: one bar for the whole folder, each way.
    const upShown = await onTerminal(['storage', 'cp', '-r', data, 'gpu:shown/']);
    expect(upShown).toMatch(/-> gpu:shown\/ \(6 files\) \[#+\] 100% \| 2\.5\/2\.5 MiB/);
    const downShown = await onTerminal(['storage', 'cp', '-r', 'gpu:shown/', join(dir, 'shown')]);
    expect(downShown).toMatch(/gpu:shown\/ -> \S+ \(6 files\) \[#+\] 100% \| 2\.5\/2\.5 MiB/);
  });

  it('copies within your objects, gpu: to gpu:, an object or a folder with -r, byte for byte', async () => {
    const here = folder('within');
    const bytes = randomBytes(8 * 1024 * 1024 + 3);
    writeFileSync(join(here, 'a.bin'), bytes);
    mkdirSync(join(here, 'dir', 'sub'), { recursive: true });
    writeFileSync(join(here, 'dir', 'x.txt'), 'x\n');
    writeFileSync(join(here, 'dir', 'sub', 'y.txt'), 'y\n');
    const sourceType = answer(await gpu(['storage', 'cp', join(here, 'a.bin'), 'gpu:within/', '--json'])).content_type;
    expect((await gpu(['storage', 'cp', '-r', join(here, 'dir'), 'gpu:within/dir'])).code).toBe(0);

    expect(sourceType).toMatch(/^application\//);
    expect(answer(await gpu(['storage', 'cp', 'gpu:within/a.bin', 'gpu:within/b.bin', '--json']))).toMatchObject({
      key: 'within/b.bin',
      size: bytes.length,
    });
    // Into a remote folder: under the source's name.
    expect(answer(await gpu(['storage', 'cp', 'gpu:within/a.bin', 'gpu:other/', '--json']))).toMatchObject({
      key: 'other/a.bin',
    });
    for (const key of ['within/b.bin', 'other/a.bin']) {
      const back = join(here, key.replace('/', '-'));
      expect((await gpu(['storage', 'cp', `gpu:${key}`, back])).code).toBe(0);
      expect(readFileSync(back).equals(bytes)).toBe(true);
    }
    // A folder with -r: the destination is the copy.
    const copied = answer(await gpu(['storage', 'cp', '-r', 'gpu:within/dir/', 'gpu:copied', '--json']));
    expect(copied.map((o: { key: string }) => o.key)).toEqual(['copied/sub/y.txt', 'copied/x.txt']);
    expect((await gpu(['storage', 'cp', 'gpu:copied/sub/y.txt', '-'])).stdout).toBe('y\n');

    // Refused, nothing copied: onto itself, a folder without -r, an object that is not there, no remote side.
    expect(await gpu(['storage', 'cp', 'gpu:within/a.bin', 'gpu:within/'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('gpu:within/a.bin would be copied onto itself'),
    });
    expect(await gpu(['storage', 'cp', 'gpu:within/dir', 'gpu:elsewhere/'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('gpu:within/dir is a folder: copy it with -r'),
    });
    expect(await gpu(['storage', 'cp', 'gpu:within/none.bin', 'gpu:x.bin'])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: no object gpu:within/none.bin\n',
    });
    expect(await gpu(['storage', 'cp', join(here, 'a.bin'), join(here, 'c.bin')])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('name a remote side'),
    });
    expect(await keysUnder('elsewhere/')).toEqual([]);
    // A folder into itself: refused before anything is copied.
    for (const [from, to] of [
      ['gpu:within/dir/', 'gpu:within/dir/backup'],
      ['gpu:', 'gpu:backup/'],
    ] as const) {
      expect(await gpu(['storage', 'cp', '-r', from, to]), `${from} ${to}`).toMatchObject({
        code: 2,
        stderr: expect.stringContaining('overlap: copy a folder to one outside it'),
      });
    }
    // Into a folder that holds it: each object goes up (to the top, `gpu:`, too)...
    const up = answer(await gpu(['storage', 'cp', '-r', 'gpu:copied/sub/', 'gpu:', '--json']));
    expect(up.map((o: { key: string }) => o.key)).toEqual(['y.txt']);
    expect((await gpu(['storage', 'cp', 'gpu:y.txt', '-'])).stdout).toBe('y\n');
    // ...unless one would land on another being copied: refused before anything is copied.
    expect((await gpu(['storage', 'cp', 'gpu:copied/x.txt', 'gpu:copied/copied/x.txt'])).code).toBe(0);
    const before = await keysUnder('');
    expect(await gpu(['storage', 'cp', '-r', 'gpu:copied/', 'gpu:'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining(
        'gpu:copied/copied/x.txt would be copied onto gpu:copied/x.txt, which is copied too',
      ),
    });
    expect(await keysUnder('')).toEqual(before);
    // The source's content type kept, not guessed again from the new key.
    const typed = answer(await gpu(['storage', 'cp', 'gpu:within/a.bin', 'gpu:other/a.txt', '--json']));
    expect(typed.content_type).toBe(sourceType);
    // The store copies: no object's bytes come to this machine or leave it, one request a copy.
    const asked = proxy.seen.length;
    expect((await gpu(['storage', 'cp', 'gpu:within/a.bin', 'gpu:kept/a.bin'])).code).toBe(0);
    const sent = proxy.seen.slice(asked).filter((r) => r.url.startsWith('/objects/'));
    expect(sent.filter((r) => r.method === 'PUT' || objectGet(r))).toEqual([]);
    expect(sent.filter((r) => r.method === 'POST').map((r) => r.url)).toEqual(['/objects/copy']);
    expect((await gpu(['storage', 'cp', 'gpu:kept/a.bin', join(here, 'kept.bin')])).code).toBe(0);
    expect(readFileSync(join(here, 'kept.bin')).equals(bytes)).toBe(true);
  });

  it('copies an object larger than a part part by part at the store, and after a failure only the parts missing', async () => {
    const here = folder('parted');
    const bytes = randomBytes(12 * 1024 * 1024 + 5);
    writeFileSync(join(here, 'big.bin'), bytes);
    const stored = answer(await gpu(['storage', 'cp', join(here, 'big.bin'), 'gpu:parted/big.bin', '--json']));
    // Parts of 5 MiB: three, each copied by the store from its range of the source.
    const env = { GPU_COPY_PART_SIZE: String(5 * 1024 * 1024) };
    const copyOf = (r: Seen) => /^\/uploads\/[^/]+\/parts\/(\d+)\/copy$/.exec(r.url)?.[1];
    // Part 2 refused as the store being away would be (every try), once parts 1 and 3 are stored: the copy stops,
    // resumable.
    const away = proxy.refuse((r) => copyOf(r) === '2', 503, 'DEPENDENCY_UNAVAILABLE', {
      after: () => partsStored('parted/copy.bin', [1, 3]),
    });
    let asked = proxy.seen.length;
    const cut = await gpu(['storage', 'cp', 'gpu:parted/big.bin', 'gpu:parted/copy.bin'], { env });
    away.end();
    expect(proxy.failures).toEqual([]);
    expect(cut.code).toBe(1);
    expect(cut.stderr).toContain('run the same command again to resume');
    expect(proxy.seen.slice(asked).filter((r) => copyOf(r) === '2').length).toBe(3);
    expect(await keysUnder('parted/')).toEqual(['parted/big.bin']);
    // Run again: the parts copied before are kept, the others copied; no byte through this machine.
    asked = proxy.seen.length;
    const again = await gpu(['storage', 'cp', 'gpu:parted/big.bin', 'gpu:parted/copy.bin', '--json'], { env });
    expect(again.stderr).toMatch(/resuming copy [0-9a-f-]+: 2 of 3 parts already copied/);
    // The source's content type kept, as a copy in one request keeps it.
    expect(answer(again)).toMatchObject({
      key: 'parted/copy.bin',
      size: bytes.length,
      content_type: stored.content_type,
    });
    const sent = proxy.seen.slice(asked);
    expect(sent.filter((r) => copyOf(r) !== undefined).map(copyOf)).toEqual(['2']);
    expect(sent.filter((r) => r.method === 'PUT' || objectGet(r))).toEqual([]);
    expect(sent.some((r) => r.url === '/objects/copy')).toBe(false);
    const back = join(here, 'back.bin');
    expect((await gpu(['storage', 'cp', 'gpu:parted/copy.bin', back])).code).toBe(0);
    expect(readFileSync(back).equals(bytes)).toBe(true);
    // A folder's large objects go part by part too (one at a time), each keeping its content type, which a listing
    // does not tell.
    const typed = await fetch(`${storage.url}/objects/${encodeURIComponent('parted/w/weights.bin')}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-weights' },
      body: bytes,
    });
    expect(typed.status).toBe(201);
    asked = proxy.seen.length;
    const folderCopy = answer(await gpu(['storage', 'cp', '-r', 'gpu:parted/w/', 'gpu:parted-w/', '--json'], { env }));
    expect(folderCopy).toEqual([
      expect.objectContaining({
        key: 'parted-w/weights.bin',
        size: bytes.length,
        content_type: 'application/x-weights',
      }),
    ]);
    expect(proxy.seen.slice(asked).filter((r) => copyOf(r) !== undefined)).toHaveLength(3);
    // A part size that is not one: said before anything is copied.
    expect(
      await gpu(['storage', 'cp', 'gpu:parted/big.bin', 'gpu:parted/x.bin'], { env: { GPU_COPY_PART_SIZE: '1000' } }),
    ).toMatchObject({ code: 2, stderr: expect.stringContaining('GPU_COPY_PART_SIZE must be bytes from 5242880') });
  });

  it('moves files and objects, each way: every source deleted once it is copied, as aws s3 mv', async () => {
    const here = folder('moving');
    writeFileSync(join(here, 'm.bin'), 'model');
    // Up: the local file is removed once stored.
    expect(answer(await gpu(['storage', 'mv', join(here, 'm.bin'), 'gpu:moving/', '--json']))).toMatchObject({
      key: 'moving/m.bin',
      size: 5,
    });
    expect(existsSync(join(here, 'm.bin'))).toBe(false);
    // Within: copied by the store, then the source deleted.
    const asked = proxy.seen.length;
    expect((await gpu(['storage', 'mv', 'gpu:moving/m.bin', 'gpu:moved/m.bin'])).code).toBe(0);
    const writes = proxy.seen
      .slice(asked)
      .filter((r) => r.url.startsWith('/objects') && !['GET', 'HEAD'].includes(r.method));
    expect(writes).toEqual([
      expect.objectContaining({ method: 'POST', url: '/objects/copy' }),
      expect.objectContaining({ method: 'DELETE', url: `/objects/${encodeURIComponent('moving/m.bin')}` }),
    ]);
    expect(await keysUnder('moving/')).toEqual([]);
    // Down: the object is deleted once written.
    expect((await gpu(['storage', 'mv', 'gpu:moved/m.bin', join(here, 'back.bin')])).code).toBe(0);
    expect(readFileSync(join(here, 'back.bin'), 'utf8')).toBe('model');
    expect(await keysUnder('moved/')).toEqual([]);
    // A folder with a filter: what was not moved stays.
    mkdirSync(join(here, 'dir'));
    writeFileSync(join(here, 'dir', 'a.pt'), 'a');
    writeFileSync(join(here, 'dir', 'b.log'), 'b');
    expect((await gpu(['storage', 'cp', '-r', join(here, 'dir'), 'gpu:mvdir/'])).code).toBe(0);
    const moved = answer(
      await gpu(['storage', 'mv', '-r', 'gpu:mvdir/', 'gpu:mvdone/', '--exclude', '*.log', '--json']),
    );
    expect(moved.map((o: { key: string }) => o.key)).toEqual(['mvdone/a.pt']);
    expect(await keysUnder('mvdir/')).toEqual(['mvdir/b.log']);
    expect(await keysUnder('mvdone/')).toEqual(['mvdone/a.pt']);
    // Folder markers (keys ending in /, as some tools store an empty folder): moved as objects are, each way, so
    // that the folder moved is not left behind.
    for (const marker of ['mvmark/', 'mvmark/empty/']) {
      const put = await fetch(`${storage.url}/objects/${encodeURIComponent(marker)}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}` },
        body: '',
      });
      expect(put.status, marker).toBe(201);
    }
    expect((await gpu(['storage', 'cp', join(here, 'dir', 'b.log'), 'gpu:mvmark/sub/'])).code).toBe(0);
    expect((await gpu(['storage', 'mv', '-r', 'gpu:mvmark/', 'gpu:mvmarked/'])).code).toBe(0);
    expect(await keysUnder('mvmark/')).toEqual([]);
    expect(await keysUnder('mvmarked/')).toEqual(['mvmarked/', 'mvmarked/empty/', 'mvmarked/sub/b.log']);
    expect((await gpu(['storage', 'mv', '-r', 'gpu:mvmarked/', join(here, 'marked')])).code).toBe(0);
    expect(await keysUnder('mvmarked/')).toEqual([]);
    expect(statSync(join(here, 'marked', 'empty')).isDirectory()).toBe(true);
    expect(readFileSync(join(here, 'marked', 'sub', 'b.log'), 'utf8')).toBe('b');
    // An object beside an empty folder of its name: -r of the name (not written as a folder) copies the object.
    for (const [key, body] of [
      ['twin', 't'],
      ['twin/', ''],
    ]) {
      const put = await fetch(`${storage.url}/objects/${encodeURIComponent(key!)}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}` },
        body,
      });
      expect(put.status, key).toBe(201);
    }
    expect((await gpu(['storage', 'cp', '-r', 'gpu:twin', 'gpu:twincopy'])).code).toBe(0);
    expect((await gpu(['storage', 'cp', 'gpu:twincopy', '-'])).stdout).toBe('t');
    // Refused, nothing deleted: standard input or output, a move onto itself.
    expect(await gpu(['storage', 'mv', '-', 'gpu:x.bin'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('- (standard input or output) is for cp'),
    });
    expect(await gpu(['storage', 'mv', 'gpu:mvdir/b.log', 'gpu:mvdir/'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('would be copied onto itself'),
    });
    expect(await keysUnder('mvdir/')).toEqual(['mvdir/b.log']);
    // A source the platform will not delete: its copy stands, it is kept, and the move says so (exit status 1).
    const deletes = proxy.refuse((r) => r.method === 'DELETE', 503, 'DEPENDENCY_UNAVAILABLE');
    const kept = await gpu(['storage', 'mv', 'gpu:mvdir/b.log', 'gpu:mvkept/b.log']);
    deletes.end();
    expect(kept.code).toBe(1);
    expect(kept.stderr).toContain('gpu:mvdir/b.log copied, not deleted');
    expect(kept.stderr).toContain('1 copied, not deleted (said above)');
    expect(await keysUnder('mvdir/')).toEqual(['mvdir/b.log']);
    expect(await keysUnder('mvkept/')).toEqual(['mvkept/b.log']);
    // A source replaced by someone else between its copy and its delete: kept as they left it (If-Match), said.
    proxy.beforeNext(
      (r) => r.method === 'DELETE' && r.url.includes(encodeURIComponent('mvdir/b.log')),
      async () => {
        const put = await fetch(`${storage.url}/objects/${encodeURIComponent('mvdir/b.log')}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${token}` },
          body: 'newer',
        });
        expect(put.status).toBe(201);
      },
    );
    const replaced = await gpu(['storage', 'mv', 'gpu:mvdir/b.log', 'gpu:mvlate/b.log']);
    expect(proxy.failures).toEqual([]);
    expect(replaced.code).toBe(1);
    expect(replaced.stderr).toContain('gpu:mvdir/b.log copied, not deleted: it was replaced since it was copied');
    expect((await gpu(['storage', 'cp', 'gpu:mvdir/b.log', '-'])).stdout).toBe('newer');
    expect((await gpu(['storage', 'cp', 'gpu:mvlate/b.log', '-'])).stdout).toBe('b');
  });

  it('chooses a folder’s files with --exclude and --include, as aws s3 cp does, each way', async () => {
    const run = folder('filtered');
    for (const name of ['a.pt', 'b.log', 'sub/c.pt', 'sub/d.tmp', 'logs/e.pt']) {
      mkdirSync(join(run, name, '..'), { recursive: true });
      writeFileSync(join(run, name), name);
    }
    const ptOnly = ['--exclude', '*', '--include', '*.pt', '--exclude', 'logs/*'];
    const up = answer(await gpu(['storage', 'cp', '-r', run, 'gpu:filtered/', ...ptOnly, '--json']));
    expect(up.map((o: { key: string }) => o.key)).toEqual(['filtered/a.pt', 'filtered/sub/c.pt']);
    expect((await gpu(['storage', 'cp', '-r', run, 'gpu:filtered/'])).code).toBe(0);
    const down = join(dir, 'filtered-down');
    expect((await gpu(['storage', 'cp', '-r', 'gpu:filtered/', down, '--exclude', 'sub/*'])).code).toBe(0);
    expect(readdirSync(down).sort()).toEqual(['a.pt', 'b.log', 'logs']);
    const within = answer(
      await gpu([
        'storage',
        'cp',
        '-r',
        'gpu:filtered/',
        'gpu:kept/',
        '--exclude',
        '*.tmp',
        '--exclude',
        '*.log',
        '--json',
      ]),
    );
    expect(within.map((o: { key: string }) => o.key)).toEqual(['kept/a.pt', 'kept/logs/e.pt', 'kept/sub/c.pt']);
    // Everything left out: said, nothing copied; the filters without -r: a usage error.
    const none = await gpu(['storage', 'cp', '-r', run, 'gpu:none/', '--exclude', '*']);
    expect(none).toMatchObject({
      code: 0,
      stderr: `gpu: ${run} holds no file the filters copy (of 5): nothing copied\n`,
    });
    expect(await gpu(['storage', 'cp', join(run, 'a.pt'), 'gpu:x.pt', '--exclude', '*'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('give them with -r'),
    });
  });

  it('presigns a URL to download an object, or with --put to upload one, for a program without credentials', async () => {
    const here = folder('presign');
    writeFileSync(join(here, 'weights.txt'), 'w1\n');
    expect((await gpu(['storage', 'cp', join(here, 'weights.txt'), 'gpu:presign/'])).code).toBe(0);

    const get = await gpu(['storage', 'presign', 'gpu:presign/weights.txt']);
    expect(get.code, get.stderr).toBe(0);
    expect(get.stdout).toMatch(/^http\S+\n$/);
    expect(await (await fetch(get.stdout.trim())).text()).toBe('w1\n');

    const before = Date.now();
    const put = answer(await gpu(['storage', 'presign', 'presign/new.txt', '--put', '--expires-in', '120', '--json']));
    expect(put).toMatchObject({ method: 'PUT', key: 'presign/new.txt' });
    const expires = Date.parse(put.expires_at);
    expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 119_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 121_000);
    expect((await fetch(put.url, { method: 'PUT', body: 'uploaded without credentials\n' })).ok).toBe(true);
    expect((await gpu(['storage', 'cp', 'gpu:presign/new.txt', '-'])).stdout).toBe('uploaded without credentials\n');

    // Refused: an object not there (to download), a folder, a duration neither form reads, one over the service's 7 days.
    expect(await gpu(['storage', 'presign', 'gpu:presign/none.txt'])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: no object gpu:presign/none.txt\n',
    });
    expect((await gpu(['storage', 'presign', 'gpu:presign/'])).code).toBe(2);
    expect((await gpu(['storage', 'presign', 'gpu:presign/weights.txt', '--expires-in', 'soon'])).code).toBe(2);
    expect(await gpu(['storage', 'presign', 'gpu:presign/weights.txt', '--expires-in', '8d'])).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/^gpu: VALIDATION_ERROR: /),
    });
  });

  it('goes on past a file that fails, as aws s3 cp --recursive does, and stops where every file would fail', async () => {
    const data = folder('partial');
    for (const name of ['a.txt', 'b.txt', 'c.txt']) writeFileSync(join(data, name), `${name}\n`);
    const named = (name: string, method: string) => (r: Seen) =>
      r.method === method && r.url.startsWith('/objects/') && r.url.endsWith(`partial%2F${name}`);
    // Up: b.txt refused by the store; a and c stored, the failure said with both names, exit 1.
    const refusedPut = proxy.refuse(named('b.txt', 'PUT'), 502, 'OBJECT_STORE_ERROR');
    const up = await gpu(['storage', 'cp', '-r', data, 'gpu:partial/']);
    expect(up.code).toBe(1);
    expect(up.stderr).toContain(`gpu: failed ${join(data, 'b.txt')} -> gpu:partial/b.txt: OBJECT_STORE_ERROR: `);
    expect(up.stderr).toContain(`gpu: COPY_INCOMPLETE: 1 of 3 files of ${data} failed (each said above), 2 stored`);
    expect(await keysUnder('partial/')).toEqual(['partial/a.txt', 'partial/c.txt']);
    // What was stored is printed as a whole copy's is.
    expect(up.stdout).toContain('│ partial/a.txt ');
    expect(up.stdout).toContain('│ partial/c.txt ');
    expect(up.stdout).not.toContain('b.txt');
    // With --json: each failure one JSON object a line, naming both sides; what was stored on standard output.
    const upJson = await gpu(['storage', 'cp', '-r', data, 'gpu:partial/', '--json']);
    expect(upJson.code).toBe(1);
    expect(JSON.parse(upJson.stdout).map((o: { key: string }) => o.key)).toEqual(['partial/a.txt', 'partial/c.txt']);
    const lines = upJson.stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ from: join(data, 'b.txt'), to: 'gpu:partial/b.txt', status: 502 });
    expect(lines[0].code).toBe('OBJECT_STORE_ERROR');
    expect(lines.at(-1)).toMatchObject({ code: 'COPY_INCOMPLETE', copied: 2, failed: 1, files: 3 });
    refusedPut.end();
    expect((await gpu(['storage', 'cp', '-r', data, 'gpu:partial/'])).code).toBe(0);

    // Down: a.txt refused; b and c written, nothing under a's name.
    const refusedGet = proxy.refuse(named('a.txt', 'GET'), 500, 'INTERNAL');
    const out = join(dir, 'partial-out');
    const down = await gpu(['storage', 'cp', '-r', 'gpu:partial/', out]);
    refusedGet.end();
    expect(down.code).toBe(1);
    expect(down.stderr).toContain(`gpu: failed gpu:partial/a.txt -> ${join(out, 'a.txt')}: INTERNAL: `);
    expect(down.stderr).toContain(
      'gpu: COPY_INCOMPLETE: 1 of 3 files of gpu:partial/ failed (each said above), 2 written',
    );
    expect(readdirSync(out).sort()).toEqual(['b.txt', 'c.txt']);
    const refusedAgain = proxy.refuse(named('a.txt', 'GET'), 500, 'INTERNAL');
    const downJson = await gpu(['storage', 'cp', '-r', 'gpu:partial/', join(dir, 'partial-json'), '--json']);
    refusedAgain.end();
    expect(downJson.code).toBe(1);
    expect(JSON.parse(downJson.stdout).map((f: { key: string }) => f.key)).toEqual(['partial/b.txt', 'partial/c.txt']);

    // A refusal every file would meet (the folder not the caller's): no new file started after it, said once.
    const many = folder('refused');
    for (let i = 0; i < 8; i++) writeFileSync(join(many, `f${i}.txt`), 'x');
    const asked = proxy.seen.length;
    const put = (r: Seen) => r.method === 'PUT' && r.url.startsWith('/objects/');
    const notOwned = proxy.refuse(put, 403, 'FOLDER_NOT_OWNED');
    const stopped = await gpu(['storage', 'cp', '-r', many, 'gpu:refused/']);
    const stoppedJson = await gpu(['storage', 'cp', '-r', many, 'gpu:refused/', '--json']);
    notOwned.end();
    expect(stopped.code).toBe(1);
    const said = stopped.stderr.split('\n');
    expect(said[0]).toBe(`gpu: 0 of 8 files of ${many} stored before the failure below`);
    expect(said[1]).toMatch(/^gpu: FOLDER_NOT_OWNED: /);
    expect(said.slice(2)).toEqual(['']);
    expect(stopped.stdout).toBe('');
    expect(JSON.parse(stoppedJson.stdout)).toEqual([]);
    expect(proxy.seen.slice(asked).filter(put).length).toBeLessThanOrEqual(8);
    // With --json: the one failure, its counts in it, nothing else on standard error.
    expect(stoppedJson.code).toBe(1);
    expect(JSON.parse(stoppedJson.stderr)).toMatchObject({ code: 'FOLDER_NOT_OWNED', copied: 0, files: 8 });

    // The platform out of reach: said once, not as a failure of each file.
    const away = await faultProxy(proxy.url);
    const viaAway = gpuAt(away.url, join(dir, 'away-config'));
    const { email, password } = await registerAndLogin(auth.app, { roles: ['renter'] });
    expect((await viaAway(['login', '--email', email], { input: `${password}\n` })).code).toBe(0);
    await away.close();
    const unreachable = await viaAway(['storage', 'cp', '-r', many, 'gpu:away/']);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).not.toContain('gpu: failed');
    expect(unreachable.stderr).toMatch(/gpu: cannot reach the platform at http:\S+ \(from GPU_URL\): ECONNREFUSED\n$/);
  });

  it('sends the parts of a large file side by side, 4 at once', async () => {
    const big = join(folder('large'), 'weights.bin');
    const bytes = randomBytes(64 * 1024 * 1024);
    writeFileSync(big, bytes);
    const parts = proxy.gate((r) => r.method === 'PUT' && /^\/uploads\/[^/]+\/parts\/\d+$/.test(r.url), 4);
    const up = answer(await gpu(['storage', 'cp', big, 'gpu:large/', '--json']));
    parts.end();
    expect(up).toMatchObject({ key: 'large/weights.bin', size: bytes.length });
    expect(parts.most()).toBe(4);
    const back = join(dir, 'large', 'back.bin');
    expect((await gpu(['storage', 'cp', 'gpu:large/weights.bin', back])).code).toBe(0);
    expect(readFileSync(back).equals(bytes)).toBe(true);
  });

  it('removes an object by its gpu: path, and everything under a prefix with rm -r', async () => {
    const trash = folder('trash');
    for (const name of ['one.txt', 'two.txt', 'three.txt']) writeFileSync(join(trash, name), name);
    mkdirSync(join(trash, 'inner'));
    writeFileSync(join(trash, 'inner', 'four.txt'), 'four');
    expect((await gpu(['storage', 'cp', '-r', trash, 'gpu:bin/trash/'])).code).toBe(0);
    expect((await gpu(['storage', 'cp', join(trash, 'one.txt'), 'gpu:bin-kept.txt'])).code).toBe(0);

    const prefix = await gpu(['storage', 'rm', 'gpu:bin/trash/']);
    expect(prefix).toMatchObject({ code: 2, stderr: expect.stringContaining('gpu:bin/trash/ is a folder') });
    expect(await gpu(['storage', 'rm', 'gpu:bin/trash/one.txt'])).toMatchObject({
      code: 0,
      stdout: 'deleted gpu:bin/trash/one.txt\n',
    });
    // The gpu: may be left out, as before; but an empty path (an unset variable) is no path, and one starting with /
    // no key, both refused before anything is asked: every object of yours is gpu:, written out.
    for (const path of ['', '/bin/trash/two.txt']) {
      const refused = await gpu(['storage', 'rm', '-r', path]);
      expect(refused.code, path).toBe(2);
    }
    expect(await keysUnder('bin')).toHaveLength(4);
    expect((await gpu(['storage', 'rm', 'bin/trash/two.txt'])).code).toBe(0);
    expect(answer(await gpu(['storage', 'rm', '-r', 'gpu:bin/', '--json']))).toEqual({
      deleted: ['bin/trash/inner/four.txt', 'bin/trash/three.txt'],
    });
    expect(await keysUnder('bin')).toEqual(['bin-kept.txt']);
    // Nothing there: said with the user's path.
    expect(await gpu(['storage', 'rm', '-r', 'gpu:bin/'])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: nothing under gpu:bin/\n',
    });
    expect(await gpu(['storage', 'rm', 'gpu:bin/trash/one.txt'])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: no object gpu:bin/trash/one.txt\n',
    });
    // rm -r of an object's own key removes the object.
    expect((await gpu(['storage', 'rm', '-r', 'gpu:bin-kept.txt'])).stdout).toBe('deleted gpu:bin-kept.txt\n');
    expect(await keysUnder('bin')).toEqual([]);
  });

  it('says a local failure as local, and names objects as the user does, never by the store’s key', async () => {
    const here = folder('failures');
    const file = join(here, 'plain.txt');
    writeFileSync(file, 'plain\n');
    expect((await gpu(['storage', 'cp', file, 'gpu:failures/plain.txt'])).code).toBe(0);

    const missing = join(here, 'missing.csv');
    expect(await gpu(['storage', 'cp', missing, 'gpu:failures/'])).toMatchObject({
      code: 1,
      stderr: `gpu: cannot read ${missing}: no such file or directory\n`,
    });
    // A file where a folder should be: the file cannot be written there.
    const under = join(file, 'inside.txt');
    expect(await gpu(['storage', 'cp', 'gpu:failures/plain.txt', under])).toMatchObject({
      code: 1,
      stderr: `gpu: cannot write ${under}: not a directory\n`,
    });
    // Folders not there yet are made, as aws s3 cp makes them.
    const notThere = join(here, 'no-such-folder', 'deeper', 'x.txt');
    expect((await gpu(['storage', 'cp', 'gpu:failures/plain.txt', notThere])).code).toBe(0);
    expect(readFileSync(notThere, 'utf8')).toBe('plain\n');

    expect(await gpu(['storage', 'cp', 'gpu:failures/gone.txt', here])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: no object gpu:failures/gone.txt\n',
    });
    expect(await gpu(['storage', 'cp', 'gpu:failures/gone.txt', '-'])).toMatchObject({
      code: 1,
      stderr: 'gpu: OBJECT_NOT_FOUND: no object gpu:failures/gone.txt\n',
    });
    // A key the store cannot hold with the user's folder in front: refused, the folder not named.
    const long = Array.from({ length: 10 }, () => 'x'.repeat(99)).join('/');
    const refused = await gpu(['storage', 'cp', file, `gpu:${long}`]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^gpu: VALIDATION_ERROR: .*gpu:/);
    expect(refused.stderr).not.toMatch(/users\//);
  });

  it('writes a download to a temporary file, renamed when whole; killed, the next run resumes it with Range', async () => {
    const bytes = randomBytes(8 * 1024 * 1024);
    const source = join(folder('resume'), 'model.bin');
    writeFileSync(source, bytes);
    expect((await gpu(['storage', 'cp', source, 'gpu:models/model.bin'])).code).toBe(0);
    const out = folder('resume-out');
    const target = join(out, 'model.bin');
    const temporary = () => readdirSync(out).filter((n) => n.startsWith('.model.bin.') && n.endsWith('.gpu-download'));
    const kept = 3 * 1024 * 1024;

    // The first run's answer stalls after 3 MiB; the run is killed there (no chance to clean up).
    proxy.limitNext(objectGet, { bytes: kept, mode: 'stall' });
    const [node, ...args] = gpuCommandLine(['storage', 'cp', 'gpu:models/model.bin', target]);
    const first = spawn(node!, args, {
      cwd: root,
      env: { ...process.env, GPU_URL: proxy.url, GPU_CONFIG_DIR: configDir },
      stdio: 'ignore',
    });
    const exited = new Promise((resolve) => first.once('exit', resolve));
    const size = () => {
      const [name] = temporary();
      return name ? statSync(join(out, name)).size : -1;
    };
    for (const started = Date.now(); size() < kept && Date.now() - started < 60_000; ) {
      await new Promise((r) => setTimeout(r, 50));
    }
    first.kill('SIGKILL');
    await exited;
    expect(size()).toBe(kept);
    expect(existsSync(target)).toBe(false);

    const asked = proxy.seen.length;
    const again = await gpu(['storage', 'cp', 'gpu:models/model.bin', target]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(`resuming download of gpu:models/model.bin: ${kept} of ${bytes.length} bytes`);
    expect(proxy.seen.slice(asked).filter(objectGet)).toEqual([
      { method: 'GET', url: '/objects/models%2Fmodel.bin', range: `bytes=${kept}-` },
    ]);
    expect(readFileSync(target).equals(bytes)).toBe(true);
    expect(temporary()).toEqual([]);

    // A connection cut mid-way: said so, the target untouched, the bytes kept for the next run.
    proxy.limitNext(objectGet, { bytes: kept, mode: 'cut' });
    const next = join(out, 'next.bin');
    const cut = await gpu(['storage', 'cp', 'gpu:models/model.bin', next]);
    expect(cut.code).toBe(1);
    const brokeOff = /^gpu: the download of gpu:models\/model\.bin broke off at (\d+) of (\d+) bytes .*resume/.exec(
      cut.stderr,
    );
    expect(brokeOff, cut.stderr).not.toBeNull();
    expect(Number(brokeOff![2])).toBe(bytes.length);
    expect(existsSync(next)).toBe(false);
    const [keptNext] = readdirSync(out).filter((n) => n.startsWith('.next.bin.'));
    expect(statSync(join(out, keptNext!)).size).toBe(Number(brokeOff![1]));
    // The object changes before the next run: the bytes kept of the old one are not joined to it.
    const changed = randomBytes(2 * 1024 * 1024);
    writeFileSync(source, changed);
    expect((await gpu(['storage', 'cp', source, 'gpu:models/model.bin'])).code).toBe(0);
    const fresh = await gpu(['storage', 'cp', 'gpu:models/model.bin', next]);
    expect(fresh.code, fresh.stderr).toBe(0);
    expect(fresh.stderr).not.toContain('resuming');
    expect(readFileSync(next).equals(changed)).toBe(true);
    expect(readdirSync(out).sort()).toEqual(['model.bin', 'next.bin']);
  });

  it('downloads an object whose name is as long as storage holds (its temporary file named by a hash)', async () => {
    const name = `${'n'.repeat(226)}.bin`;
    const source = join(folder('long'), name);
    writeFileSync(source, 'long name');
    expect((await gpu(['storage', 'cp', source, `gpu:long/${name}`])).code).toBe(0);
    const out = folder('long-out');
    const down = await gpu(['storage', 'cp', `gpu:long/${name}`, join(out, name)]);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(join(out, name), 'utf8')).toBe('long name');
    expect(readdirSync(out)).toEqual([name]);
  });
});
