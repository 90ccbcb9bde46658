/**
 * Users' SSH public keys at the auth service: registered, listed and removed by the user's own sign-in, with the
 * fingerprint `ssh-keygen -lf` prints; every input that is not one good OpenSSH public key refused with its code; read
 * by the platform's services for any user; in the audit trail; gone when the account starts afresh.
 */
import { execFileSync } from 'node:child_process';
import { createHash, generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SCOPES, UNCHECKED_PRINCIPAL } from '@gpu/common';
import ssh2 from 'ssh2';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { insertUser } from '../src/db/user-repository.ts';
import { startAfresh } from '../src/domain/accounts/index.ts';
import { createClient } from '../src/domain/clients.ts';
import { MAX_SSH_KEYS_PER_USER } from '../src/domain/ssh-keys/index.ts';
import { issueAccessToken, issueClientToken } from '../src/domain/token-pair.ts';
import { newEd25519Key, SSH_FIXTURES } from './fixtures/ssh-keys.ts';
import { bearer, registerAndLogin, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const auth = useAuth(testConfig());
const API = '/api/v1/auth';
let renter: Awaited<ReturnType<typeof registerAndLogin>>;
let service: Record<string, string>;
let admin: Record<string, string>;

interface SshKey {
  id: string;
  name: string;
  type: string;
  fingerprint: string;
  public_key: string;
  created_at: string;
}

beforeAll(async () => {
  const { client } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `ssh-${randomUUID()}`,
    role: 'service',
  });
  service = bearer((await issueClientToken(auth.ctx, client)).token);
  const row = await insertUser(auth.db, { email: uniqueEmail('admin'), password_hash: 'x', roles: ['admin'] });
  admin = bearer((await issueAccessToken(auth.ctx, row)).token);
});

// A renter of their own for each test: keys and their limit count per user.
beforeEach(async () => {
  renter = await registerAndLogin(auth.app, { roles: ['renter'] });
});

const own = () => bearer(renter.tokens.access_token);
const add = (headers: Record<string, string>, payload: Record<string, unknown>) =>
  auth.app.inject({ method: 'POST', url: `${API}/ssh-keys`, headers, payload });
const list = (headers: Record<string, string>, url = `${API}/ssh-keys`) => auth.app.inject({ url, headers });
const remove = (headers: Record<string, string>, id: string) =>
  auth.app.inject({ method: 'DELETE', url: `${API}/ssh-keys/${id}`, headers });

/** A new ed25519 public-key line. */
const newKeyLine = (comment = 'generated') => newEd25519Key(comment).line;

async function added(payload: Record<string, unknown>, headers = own()): Promise<SshKey> {
  const res = await add(headers, payload);
  expect(res.statusCode, res.body).toBe(201);
  return res.json();
}

describe('SSH keys', () => {
  it.each(Object.entries(SSH_FIXTURES).filter(([name]) => name !== 'rsa1024' && name !== 'dsa'))(
    'registers a %s key with the fingerprint ssh-keygen -lf printed, its comment as its name',
    async (_name, fixture) => {
      const key = await added({ public_key: `${fixture.line}\n` });
      const [type, data, comment] = fixture.line.split(' ');
      expect(key).toEqual({
        id: expect.any(String),
        name: comment,
        type,
        fingerprint: fixture.fingerprint,
        public_key: `${type} ${data}`,
        created_at: expect.stringMatching(/Z$/),
      });
      expect((await list(own())).json()).toEqual([key]);
    },
  );

  it('computes the fingerprint ssh-keygen prints for a key it makes now', async (t) => {
    let keygen = true;
    try {
      execFileSync('ssh-keygen', ['-?'], { stdio: 'ignore' });
    } catch (err) {
      keygen = (err as { code?: string }).code !== 'ENOENT';
    }
    if (!keygen) t.skip('ssh-keygen is not installed (the fixtures above hold what it printed)');
    const dir = mkdtempSync(join(tmpdir(), 'ssh-keys-'));
    try {
      for (const [type, bits] of [
        ['ed25519', '256'],
        ['ecdsa', '384'],
        ['rsa', '3072'],
      ] as const) {
        const file = join(dir, type);
        execFileSync('ssh-keygen', ['-q', '-t', type, '-b', bits, '-N', '', '-C', `made-${type}`, '-f', file]);
        const printed = execFileSync('ssh-keygen', ['-lf', `${file}.pub`], { encoding: 'utf8' }).split(' ')[1];
        const key = await added({ public_key: readFileSync(`${file}.pub`, 'utf8') });
        expect(key.fingerprint).toBe(printed);
        expect(key.name).toBe(`made-${type}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("fingerprints the key's wire form: SHA256: and the unpadded base64 of its SHA-256", async () => {
    const { line, blob } = newEd25519Key();
    const key = await added({ public_key: line, name: 'from node' });
    const digest = createHash('sha256').update(blob).digest('base64');
    expect(key.fingerprint).toBe(`SHA256:${digest.replace(/=+$/, '')}`);
    expect(key).toMatchObject({ name: 'from node', type: 'ssh-ed25519' });
  });

  it('names a key as asked, else by its comment, else by its type', async () => {
    expect((await added({ public_key: newKeyLine('laptop'), name: '  work laptop ' })).name).toBe('work laptop');
    const bare = newKeyLine().split(' ').slice(0, 2).join(' ');
    expect((await added({ public_key: bare })).name).toBe('ssh-ed25519 key');
    const long = `${newKeyLine().split(' ').slice(0, 2).join(' ')} ${'c'.repeat(150)}`;
    expect((await added({ public_key: long })).name).toBe('c'.repeat(100));
  });

  const privateEd25519 = () => generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' });
  const ed = SSH_FIXTURES.ed25519.line;
  const [edType, edData] = ed.split(' ') as [string, string];
  /** A key line of hand-made data: the type, then each part as an SSH wire string. */
  const keyLine = (type: string, parts: Buffer[]) =>
    `${type} ${Buffer.concat(
      [type, ...parts].map((part) => {
        const bytes = Buffer.from(part);
        const length = Buffer.alloc(4);
        length.writeUInt32BE(bytes.length);
        return Buffer.concat([length, bytes]);
      }),
    ).toString('base64')}`;
  /** The wire strings after the type of a fixture's data. */
  const partsOf = (line: string) => {
    const blob = Buffer.from(line.split(' ')[1] ?? '', 'base64');
    const parts: Buffer[] = [];
    for (let at = 0; at < blob.length; ) {
      const length = blob.readUInt32BE(at);
      parts.push(blob.subarray(at + 4, at + 4 + length));
      at += 4 + length;
    }
    return parts.slice(1);
  };
  const rsaParts = () => partsOf(SSH_FIXTURES.rsa2048.line) as [Buffer, Buffer];
  const ecdsaPoint = () => partsOf(SSH_FIXTURES.ecdsa256.line)[1] as Buffer;
  const refusals: [string, () => unknown, string][] = [
    ['an OpenSSH private key', () => ssh2.utils.generateKeyPairSync('ed25519').private, 'SSH_KEY_IS_PRIVATE'],
    ['a PKCS#8 private key', privateEd25519, 'SSH_KEY_IS_PRIVATE'],
    ['a DSA key', () => SSH_FIXTURES.dsa.line, 'SSH_KEY_TYPE_NOT_ALLOWED'],
    ['an RSA key of 1024 bits', () => SSH_FIXTURES.rsa1024.line, 'SSH_KEY_TOO_SHORT'],
    ['a security-key type', () => `sk-ssh-ed25519@openssh.com ${edData}`, 'SSH_KEY_TYPE_NOT_ALLOWED'],
    ['options before the key', () => `command="/bin/sh",no-pty ${ed}`, 'INVALID_SSH_KEY'],
    ['an option word before the key', () => `restrict ${ed}`, 'INVALID_SSH_KEY'],
    ['two keys', () => `${ed}\n${SSH_FIXTURES.ecdsa256.line}`, 'INVALID_SSH_KEY'],
    ['words', () => 'hello there', 'INVALID_SSH_KEY'],
    ['data that is not base64', () => `${edType} not*base64`, 'INVALID_SSH_KEY'],
    ['data cut short', () => `${edType} ${edData.slice(0, 40)}`, 'INVALID_SSH_KEY'],
    ['data of another type', () => `ssh-rsa ${edData}`, 'INVALID_SSH_KEY'],
    [
      'bytes after the key',
      () => `${edType} ${Buffer.concat([Buffer.from(edData, 'base64'), Buffer.from('more')]).toString('base64')}`,
      'INVALID_SSH_KEY',
    ],
    ['a control character in the comment', () => `${ed}\u0007`, 'INVALID_SSH_KEY'],
    [
      'an RSA key of an empty modulus',
      () => keyLine('ssh-rsa', [Buffer.from([1, 0, 1]), Buffer.alloc(0)]),
      'INVALID_SSH_KEY',
    ],
    ['an RSA key of an empty exponent', () => keyLine('ssh-rsa', [Buffer.alloc(0), rsaParts()[1]]), 'INVALID_SSH_KEY'],
    [
      'an RSA modulus padded with zeros',
      () => keyLine('ssh-rsa', [rsaParts()[0], Buffer.concat([Buffer.alloc(2), rsaParts()[1]])]),
      'INVALID_SSH_KEY',
    ],
    [
      'an ECDSA key of no point',
      () => keyLine('ecdsa-sha2-nistp256', [Buffer.from('nistp256'), Buffer.alloc(0)]),
      'INVALID_SSH_KEY',
    ],
    [
      'an ECDSA point off its curve',
      () =>
        keyLine('ecdsa-sha2-nistp256', [Buffer.from('nistp256'), Buffer.concat([Buffer.from([4]), Buffer.alloc(64)])]),
      'INVALID_SSH_KEY',
    ],
    [
      'an ECDSA key naming another curve',
      () => keyLine('ecdsa-sha2-nistp256', [Buffer.from('nistp384'), ecdsaPoint()]),
      'INVALID_SSH_KEY',
    ],
    ['an over-long line', () => `${ed} ${'x'.repeat(8200)}`, 'VALIDATION_ERROR'],
    ['an empty key', () => '', 'VALIDATION_ERROR'],
    ['no key', () => undefined, 'VALIDATION_ERROR'],
    ['a number', () => 42, 'VALIDATION_ERROR'],
  ];

  it.each(refusals)('refuses %s: 400 with a problem body naming it', async (_what, key, code) => {
    const text = key();
    const res = await add(own(), text === undefined ? { name: 'x' } : { public_key: text });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ status: 400, code, errors: [{ path: 'body.public_key' }] });
    if (typeof text === 'string' && text.includes('PRIVATE KEY')) expect(res.body).not.toContain(text.slice(40, 80));
    expect((await list(own())).json()).toEqual([]);
  });

  it('refuses a name with control characters, or too long', async () => {
    for (const name of ['tab\there', 'n'.repeat(101), '']) {
      const res = await add(own(), { public_key: newKeyLine(), name });
      expect(res.statusCode, name).toBe(400);
      expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR', errors: [{ path: 'body.name' }] });
    }
  });

  it('registers a key once per user (409 SSH_KEY_EXISTS, whatever its comment); another user may too', async () => {
    const line = newKeyLine('first');
    const first = await added({ public_key: line });
    const again = await add(own(), { public_key: line.replace('first', 'second'), name: 'other name' });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ code: 'SSH_KEY_EXISTS', detail: expect.stringContaining(first.fingerprint) });
    const other = await registerAndLogin(auth.app, { roles: ['renter'] });
    expect((await added({ public_key: line }, bearer(other.tokens.access_token))).fingerprint).toBe(first.fingerprint);
  });

  it(`holds at most ${MAX_SSH_KEYS_PER_USER} keys a user (409 TOO_MANY_SSH_KEYS); removing one makes room`, async () => {
    const keys: SshKey[] = [];
    for (let i = 0; i < MAX_SSH_KEYS_PER_USER; i++) keys.push(await added({ public_key: newKeyLine(`k${i}`) }));
    const over = await add(own(), { public_key: newKeyLine() });
    expect(over.statusCode).toBe(409);
    expect(over.json()).toMatchObject({ code: 'TOO_MANY_SSH_KEYS' });
    const listed = (await list(own())).json() as SshKey[];
    expect(listed.map((k) => k.id)).toEqual(keys.map((k) => k.id));
    expect((await remove(own(), keys[0]!.id)).statusCode).toBe(204);
    await added({ public_key: newKeyLine() });
  });

  it("removes a key (204, then 404); another user's key is 404 and stays", async () => {
    const key = await added({ public_key: newKeyLine() });
    const other = bearer((await registerAndLogin(auth.app, { roles: ['renter', 'provider'] })).tokens.access_token);
    const theirs = await remove(other, key.id);
    expect(theirs.statusCode).toBe(404);
    expect(theirs.json()).toMatchObject({ code: 'SSH_KEY_NOT_FOUND' });
    expect((await list(own())).json()).toHaveLength(1);
    const res = await remove(own(), key.id);
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
    expect((await list(own())).json()).toEqual([]);
    expect((await remove(own(), key.id)).json()).toMatchObject({ code: 'SSH_KEY_NOT_FOUND' });
    expect((await remove(own(), 'not-a-uuid')).statusCode).toBe(400);
  });

  it('takes no API key to add or remove keys; one with read lists them', async () => {
    const key = await added({ public_key: newKeyLine() });
    const token = async (scopes: string[]) => {
      const made = await auth.app.inject({
        method: 'POST',
        url: `${API}/keys`,
        headers: own(),
        payload: { name: `k-${randomUUID()}`, scopes },
      });
      const res = await auth.app.inject({
        method: 'POST',
        url: `${API}/token`,
        payload: { grant_type: 'api_key', api_key: made.json().api_key },
      });
      return bearer(res.json().access_token);
    };
    const every = await token([...SCOPES]);
    for (const res of [await add(every, { public_key: newKeyLine() }), await remove(every, key.id)]) {
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE' });
    }
    expect((await list(every)).json()).toEqual([key]);
    const offersOnly = await list(await token(['offers']));
    expect(offersOnly.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE', required_scope: 'read' });
  });

  it("answers a user's keys to platform services and admins; a renter asking for anyone's is 403", async () => {
    const keys = [await added({ public_key: newKeyLine('a') }), await added({ public_key: newKeyLine('b') })];
    const url = `${API}/users/${renter.user.id}/ssh-keys`;
    for (const headers of [service, admin]) {
      const res = await list(headers, url);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toEqual(keys);
    }
    const paged = await list(service, `${url}?limit=1`);
    expect(paged.json()).toEqual([keys[0]]);
    expect((await list(service, `${url}?limit=1&cursor=${paged.headers['x-next-cursor']}`)).json()).toEqual([keys[1]]);
    const someoneElse = await registerAndLogin(auth.app, { roles: ['renter'] });
    for (const [headers, target] of [
      [bearer(someoneElse.tokens.access_token), renter.user.id],
      [own(), renter.user.id],
      [own(), someoneElse.user.id],
    ] as const) {
      const res = await list(headers, `${API}/users/${target}/ssh-keys`);
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ code: 'ROLE_REQUIRED' });
    }
    const unknown = await list(service, `${API}/users/${randomUUID()}/ssh-keys`);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ code: 'USER_NOT_FOUND' });
  });

  it('records adding and removing in the audit trail, with who, the key and its fingerprint', async () => {
    const key = await added({ public_key: newKeyLine('audited') });
    expect((await remove(own(), key.id)).statusCode).toBe(204);
    const events = (await list(admin, `${API}/audit?target=ssh_key:${key.id}`)).json();
    expect(events).toEqual([
      expect.objectContaining({
        action: 'ssh_key_added',
        outcome: 'succeeded',
        actor_id: renter.user.id,
        details: { name: 'audited', type: 'ssh-ed25519', fingerprint: key.fingerprint },
      }),
      expect.objectContaining({
        action: 'ssh_key_removed',
        actor_id: renter.user.id,
        details: { name: 'audited', type: 'ssh-ed25519', fingerprint: key.fingerprint },
      }),
    ]);
  });

  it('removes every key when the account starts afresh; a sign-in from before adds none', async () => {
    await added({ public_key: newKeyLine() });
    const fresh = await auth.db
      .transaction()
      .execute((trx) => startAfresh(trx, renter.user.id, 'a new hash', 'test', new Date()));
    expect(fresh.sshKeysRemoved).toBe(1);
    expect((await list(service, `${API}/users/${renter.user.id}/ssh-keys`)).json()).toEqual([]);
    const late = await add(own(), { public_key: newKeyLine() });
    expect(late.statusCode).toBe(401);
    expect(late.json()).toMatchObject({ code: 'SIGN_IN_ENDED' });
  });
});
