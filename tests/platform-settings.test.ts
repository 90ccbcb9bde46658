/**
 * What `pnpm start` decides before it starts anything, checked on its own: the data folder an empty
 * PLATFORM_DATA_DIR names, the data folder's mode, auth's register limit on loopback alone, and the command line
 * a port-in-use refusal names.
 */
import { generateKeyPairSync } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LOOPBACK_REGISTER_PER_IP, loopbackAuthEnv } from '../scripts/lib/auth-mode.ts';
import { makeDataDir, platformDataDir, repoRoot } from '../scripts/lib/platform.ts';
import { shortCommand } from '../scripts/lib/port-holders.ts';

const modeOf = (dir: string) => statSync(dir).mode & 0o7777;

describe('the data folder', () => {
  it('is the checkout .data for an empty PLATFORM_DATA_DIR, as for an unset one', () => {
    expect(platformDataDir({ PLATFORM_DATA_DIR: '' })).toBe(path.join(repoRoot, '.data'));
    expect(platformDataDir({})).toBe(path.join(repoRoot, '.data'));
    expect(platformDataDir({ PLATFORM_DATA_DIR: '/tmp/x/../platform' })).toBe('/tmp/platform');
  });

  it("is made this user's alone, whatever the umask, and an old one open to others is closed", () => {
    const base = mkdtempSync(path.join(tmpdir(), 'data-mode-'));
    const fresh = path.join(base, 'fresh', 'data');
    const umask = process.umask(0o022);
    try {
      expect(makeDataDir(fresh)).toBeUndefined();
    } finally {
      process.umask(umask);
    }
    expect(modeOf(fresh)).toBe(0o700);
    // A folder a start made with the umask's 0755 before: its objects were readable by every local user.
    const old = path.join(base, 'old');
    mkdirSync(path.join(old, 's3'), { recursive: true });
    chmodSync(old, 0o755);
    expect(makeDataDir(old)).toBe(`the data folder ${old} was open to other local users (mode 0755): now 0700`);
    expect(modeOf(old)).toBe(0o700);
    expect(makeDataDir(old)).toBeUndefined();
    // A folder that is not plainly a data folder (a shared one named by mistake) keeps its mode, as does a sticky one.
    const shared = path.join(base, 'shared');
    mkdirSync(shared);
    writeFileSync(path.join(shared, 'notes.txt'), 'mine\n');
    chmodSync(shared, 0o755);
    expect(makeDataDir(shared)).toBeUndefined();
    expect(modeOf(shared)).toBe(0o755);
    const sticky = path.join(base, 'sticky');
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    expect(makeDataDir(sticky)).toBeUndefined();
    expect(modeOf(sticky)).toBe(0o1777);
  });
});

describe("auth's register limit under pnpm start", () => {
  it('is raised on loopback alone, where every caller is this machine, unless the user set one', async () => {
    const raised = { AUTH__RATE_LIMIT__REGISTER_PER_IP: LOOPBACK_REGISTER_PER_IP };
    for (const bind of ['127.0.0.1', '127.0.0.2', '::1']) expect(await loopbackAuthEnv({}, bind)).toEqual(raised);
    // Other machines reach these: auth keeps its own limit.
    for (const bind of ['0.0.0.0', '::', '10.1.2.3', 'fd00::1']) expect(await loopbackAuthEnv({}, bind)).toEqual({});
    // A limit of the user's, in a spelling auth takes, or in its configuration file, is kept.
    expect(await loopbackAuthEnv({ AUTH__RATE_LIMIT__REGISTER_PER_IP: '5/1h' }, '127.0.0.1')).toEqual({});
    expect(await loopbackAuthEnv({ AUTH__RateLimit__RegisterPerIp: '5/1h' }, '127.0.0.1')).toEqual({});
    const dir = mkdtempSync(path.join(tmpdir(), 'auth-config-'));
    const file = path.join(dir, 'auth.yaml');
    writeFileSync(file, 'rate_limit:\n  register_per_ip: 3/1h\n');
    expect(await loopbackAuthEnv({ AUTH_CONFIG_FILE: file }, '127.0.0.1')).toEqual({});
    writeFileSync(file, 'rate_limit:\n  login_per_ip: 3/1m\n');
    expect(await loopbackAuthEnv({ AUTH_CONFIG_FILE: file }, '127.0.0.1')).toEqual(raised);
  });

  it('is a setting the auth service takes', async () => {
    const { loadAuthConfig } = await import('../services/auth/src/config.ts');
    const key = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const config = loadAuthConfig({ JWT_PRIVATE_KEY: key, ...(await loopbackAuthEnv({}, '127.0.0.1')) });
    expect(config.rate_limit.register_per_ip).toEqual({ max: 1000, windowMs: 3_600_000 });
  });
});

describe('the command line a port-in-use refusal names', () => {
  it("shortens a program's path to its name, paths in the checkout to the checkout's", () => {
    expect(shortCommand(['/usr/bin/node', `${repoRoot}services/auth/dist/src/server.js`, ''])).toBe(
      'node services/auth/dist/src/server.js',
    );
  });

  it('keeps the title a program wrote over its arguments (nginx), shortening only its first word', () => {
    // nginx writes its title over argv: one string with spaces, NUL-padded.
    const title = 'nginx: master process /usr/sbin/nginx -c /tmp/data/gateway/nginx.conf';
    expect(shortCommand([title, '', ''])).toBe(title);
    expect(shortCommand(['nginx: worker process'])).toBe('nginx: worker process');
    expect(shortCommand(['/usr/sbin/nginx -g daemon off;'])).toBe('nginx -g daemon off;');
  });
});
