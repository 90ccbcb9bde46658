/**
 * `gpu ssh-key` run as a person runs it (a child process) against the real auth service: a key added from its .pub
 * file, from standard input and from the default `~/.ssh/id_ed25519.pub`, listed with the fingerprint `ssh-keygen -lf`
 * printed, refused in one line, removed; a private key refused before anything is sent.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { SSH_FIXTURES } from '../../../services/auth/test/fixtures/ssh-keys.ts';
import { registerAndLogin, testConfig, useAuth } from '../../../services/auth/test/helpers.ts';
import { CLI_TEST_MS, type Gpu, type GpuResult, gpuAt } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const auth = useAuth(testConfig());
const dir = mkdtempSync(join(tmpdir(), 'gpu-ssh-key-'));
let gpu: Gpu;

beforeAll(async () => {
  // The commands here speak to auth alone: its routes are the gateway's /api/v1/auth/... as they are.
  const url = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  const { email, password } = await registerAndLogin(auth.app, { roles: ['renter'] });
  gpu = gpuAt(url, join(dir, 'config'));
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login.code, login.stderr).toBe(0);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function answer(r: GpuResult) {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

function refused(r: GpuResult, code: string) {
  expect(r.stderr).toMatch(new RegExp(`^gpu: ${code}: [^\\n]+\\n$`));
  expect(r.code).toBe(1);
}

describe('gpu ssh-key', () => {
  it('adds keys from a file, standard input and ~/.ssh/id_ed25519.pub, lists them and removes one', async () => {
    const file = join(dir, 'laptop.pub');
    writeFileSync(file, `${SSH_FIXTURES.ed25519.line}\n`);
    const laptop = answer(await gpu(['ssh-key', 'add', file, '--json']));
    expect(laptop).toMatchObject({
      name: 'renter@laptop',
      type: 'ssh-ed25519',
      fingerprint: SSH_FIXTURES.ed25519.fingerprint,
    });
    const piped = answer(
      await gpu(['ssh-key', 'add', '-', '--name', 'build box', '--json'], { input: SSH_FIXTURES.ecdsa256.line }),
    );
    expect(piped).toMatchObject({ name: 'build box', fingerprint: SSH_FIXTURES.ecdsa256.fingerprint });

    const home = join(dir, 'home');
    const noKey = await gpu(['ssh-key', 'add'], { env: { HOME: home } });
    expect(noKey).toMatchObject({ code: 2, stderr: expect.stringContaining('id_ed25519.pub does not exist') });
    mkdirSync(join(home, '.ssh'), { recursive: true });
    writeFileSync(join(home, '.ssh', 'id_ed25519.pub'), SSH_FIXTURES.rsa2048.line);
    const byDefault = await gpu(['ssh-key', 'add'], { env: { HOME: home } });
    expect(byDefault.code, byDefault.stderr).toBe(0);
    expect(byDefault.stdout).toContain(SSH_FIXTURES.rsa2048.fingerprint);

    const table = await gpu(['ssh-key', 'list']);
    expect(table.code).toBe(0);
    for (const f of [SSH_FIXTURES.ed25519, SSH_FIXTURES.ecdsa256, SSH_FIXTURES.rsa2048])
      expect(table.stdout).toContain(f.fingerprint);
    const listed = answer(await gpu(['ssh-key', '--json']));
    expect(listed.map((k: { id: string }) => k.id).slice(0, 2)).toEqual([laptop.id, piped.id]);

    refused(await gpu(['ssh-key', 'add', file]), 'SSH_KEY_EXISTS');
    const removed = answer(await gpu(['ssh-key', 'rm', laptop.id, '--json']));
    expect(removed).toEqual({ id: laptop.id, removed: true });
    refused(await gpu(['ssh-key', 'rm', laptop.id]), 'SSH_KEY_NOT_FOUND');
    expect(answer(await gpu(['ssh-key', 'list', '--json']))).toHaveLength(2);
  });

  it('refuses a key auth does not take in one line, and a private key before sending it', async () => {
    const dsa = join(dir, 'dsa.pub');
    writeFileSync(dsa, SSH_FIXTURES.dsa.line);
    refused(await gpu(['ssh-key', 'add', dsa]), 'SSH_KEY_TYPE_NOT_ALLOWED');
    refused(await gpu(['ssh-key', 'add', '-'], { input: SSH_FIXTURES.rsa1024.line }), 'SSH_KEY_TOO_SHORT');
    const secret = join(dir, 'id_ed25519');
    writeFileSync(secret, generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }));
    const before = answer(await gpu(['ssh-key', 'list', '--json']));
    const res = await gpu(['ssh-key', 'add', secret]);
    expect(res).toMatchObject({ code: 2, stderr: expect.stringContaining('is a private key') });
    expect(answer(await gpu(['ssh-key', 'list', '--json']))).toEqual(before);
    expect((await gpu(['ssh-key', 'rm'])).code).toBe(2);
  });

  it('says in its help what it takes', async () => {
    const help = await gpu(['ssh-key', 'add', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('~/.ssh/id_ed25519.pub');
    expect(help.stdout).toContain('ssh-ed25519');
  });
});
