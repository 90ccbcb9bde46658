/**
 * What `gpu ssh-config` writes, without a platform: the `Host` blocks as OpenSSH reads them (checked by `ssh -G`),
 * how it names the `gpu` that ssh runs (from a checkout and from the package's bin), and its marked block set into an
 * existing `~/.ssh/config` of a temporary home: added at the end, replaced in place, the rest of the file kept.
 */
import { execFile } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  BEGIN_MARKER,
  END_MARKER,
  hostBlocks,
  markedBlock,
  readOrEmpty,
  replaceMarkedBlock,
  selfCommand,
  shellWord,
  writeWhole,
} from '../src/ssh-config.ts';
import { CLI_TEST_MS, gpuAt, root } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'gpu-ssh-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ID = '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11';
const OTHER = '9a1d2e3f-0000-4000-8000-000000000001';
const GPU = ['/usr/bin/node', '/opt/gpu/bin/gpu.mjs', '--url', 'https://gpu.example'];

describe('the Host blocks', () => {
  it('names each session gpu-<first 8> and gpu-<id>, through gpu ssh-proxy, with the platform key alone trusted', () => {
    const text = hostBlocks([ID, OTHER], { gpu: GPU, knownHosts: '/home/me/.config/gpu/known_hosts' });
    expect(text).toBe(
      [
        `Host gpu-3f0c5b8e gpu-${ID}`,
        `  HostName ${ID}`,
        '  User workload',
        '  ProxyCommand /usr/bin/node /opt/gpu/bin/gpu.mjs --url https://gpu.example ssh-proxy %h',
        '  HostKeyAlias gpu-platform',
        '  UserKnownHostsFile /home/me/.config/gpu/known_hosts',
        '  StrictHostKeyChecking yes',
        '',
        `Host gpu-9a1d2e3f gpu-${OTHER}`,
        `  HostName ${OTHER}`,
        '  User workload',
        '  ProxyCommand /usr/bin/node /opt/gpu/bin/gpu.mjs --url https://gpu.example ssh-proxy %h',
        '  HostKeyAlias gpu-platform',
        '  UserKnownHostsFile /home/me/.config/gpu/known_hosts',
        '  StrictHostKeyChecking yes',
        '',
      ].join('\n'),
    );
    const withKey = hostBlocks([ID], { gpu: GPU, knownHosts: '/k', identity: '/home/me/.ssh/id_gpu' });
    expect(withKey).toContain('  IdentityFile /home/me/.ssh/id_gpu\n  IdentitiesOnly yes\n');
    // Two sessions whose IDs start alike get their whole IDs only.
    const twin = `${ID.slice(0, 8)}-ffff-4fff-8fff-ffffffffffff`;
    expect(hostBlocks([ID, twin], { gpu: GPU, knownHosts: '/k' })).toMatch(new RegExp(`^Host gpu-${ID}\\n`, 'm'));
  });

  it('quotes for the shell and for ssh, and writes a literal % as %%', () => {
    expect(shellWord('/usr/bin/node')).toBe('/usr/bin/node');
    expect(shellWord("/Users/Jo's Mac/gpu")).toBe(`'/Users/Jo'\\''s Mac/gpu'`);
    const text = hostBlocks([ID], {
      gpu: ['env', 'GPU_CONFIG_DIR=/tmp/a b', '/usr/bin/node', '/opt/100%/gpu.mjs'],
      knownHosts: '/tmp/a b/known_hosts',
      identity: '/keys/50%.key',
    });
    expect(text).toContain(
      `  ProxyCommand env 'GPU_CONFIG_DIR=/tmp/a b' /usr/bin/node /opt/100%%/gpu.mjs ssh-proxy %h\n`,
    );
    expect(text).toContain('  UserKnownHostsFile "/tmp/a b/known_hosts"\n');
    expect(text).toContain('  IdentityFile /keys/50%%.key\n');
  });

  it('reads as OpenSSH reads it (ssh -G)', async () => {
    const file = join(dir, 'ssh_config');
    const knownHosts = join(dir, 'with space', 'known_hosts');
    writeFileSync(file, markedBlock(hostBlocks([ID], { gpu: [...GPU, "it's"], knownHosts, identity: '/k/50%.key' })));
    const { stdout } = await run('ssh', ['-G', '-F', file, 'gpu-3f0c5b8e']);
    const options = new Map(
      stdout
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf(' ')), l.slice(l.indexOf(' ') + 1)] as const),
    );
    expect(options.get('hostname')).toBe(ID);
    expect(options.get('user')).toBe('workload');
    expect(options.get('hostkeyalias')).toBe('gpu-platform');
    expect(options.get('stricthostkeychecking')).toBe('true');
    expect(options.get('userknownhostsfile')).toBe(knownHosts);
    // Tokens (%h, %%) are expanded when used, later than -G shows.
    expect(options.get('identityfile')).toBe('/k/50%%.key');
    expect(options.get('proxycommand')).toBe(
      `/usr/bin/node /opt/gpu/bin/gpu.mjs --url https://gpu.example 'it'\\''s' ssh-proxy %h`,
    );
  });
});

describe('the gpu that ssh runs', () => {
  const bin = join(root, 'tools/cli/bin/gpu.mjs');

  it("is the package's bin for TypeScript run through a loader, and a plain script as it is", () => {
    const node = '/usr/local/bin/node';
    const main = join(root, 'tools/cli/src/main.ts');
    expect(selfCommand({ execPath: node, script: main, execArgv: ['--import', 'tsx'] })).toEqual([node, bin]);
    expect(selfCommand({ execPath: node, script: bin, execArgv: [] })).toEqual([node, bin]);
    const installed = '/usr/lib/node_modules/@gpu/cli/bin/gpu.mjs';
    expect(selfCommand({ execPath: node, script: installed, execArgv: ['--no-warnings'] })).toEqual([node, installed]);
    // No bin beside it: the loader it ran under, again.
    expect(
      selfCommand({ execPath: node, script: main, execArgv: ['--import', 'tsx'] }, join(dir, 'no-such-bin.mjs')),
    ).toEqual([node, '--import', 'tsx', main]);
  });

  it('runs: the bin answers --help from any folder', async () => {
    const [node, script] = selfCommand({ execPath: process.execPath, script: 'tools/cli/src/main.ts', execArgv: [] });
    const { stdout } = await run(node!, [script!, 'ssh-proxy', '--help'], { cwd: tmpdir() });
    expect(stdout).toContain("OpenSSH's ProxyCommand");
  });
});

describe('gpu ssh-config on the command line', () => {
  it('refuses what is not a session ID, or a key file that is not there: exit status 2, nothing sent', async () => {
    // Nothing listens at this URL: a run that sent anything would fail otherwise (exit status 1).
    const gpu = gpuAt('http://127.0.0.1:9', join(dir, 'cli-config'));
    const notAnId = await gpu(['ssh-config', 'my-box']);
    expect(notAnId).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'gpu: my-box is not a session ID (gpu sessions lists yours)\n',
    });
    const noKey = await gpu(['ssh-config', `gpu-${ID}`, '--identity', join(dir, 'no-such-key')]);
    expect(noKey).toMatchObject({ code: 2, stderr: expect.stringContaining('no-such-key does not exist') });
  });
});

describe('a hostile platform', () => {
  /** A platform that answers the caller's sessions and host key as told, and records nothing else. */
  async function platform(sessionIds: string[], hostKey: string): Promise<{ url: string; close(): void }> {
    const server = createServer((req, res) => {
      const url = req.url ?? '';
      const json = (body: unknown) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (url === '/api/v1/auth/me') return json({ id: 'u1', email: 'a@b.c', email_verified: true, roles: ['renter'] });
      if (url.startsWith('/api/v1/billing/sessions')) return json(sessionIds.map((id) => ({ id, user_id: 'u1' })));
      if (url === '/api/v1/billing/reach/ssh-host-key') return json({ public_key: hostKey, fingerprint: 'SHA256:x' });
      if (url.startsWith('/api/v1/auth/ssh-keys')) return json([]);
      res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
  }

  const hostKey = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl';

  it('writes none of a session ID that is not one into ~/.ssh/config (a Match exec would run at every ssh)', async () => {
    const home = join(dir, 'hostile-home');
    mkdirSync(join(home, '.ssh'), { recursive: true });
    const ran = join(dir, 'ran');
    const hostile = [`${ID}\nMatch exec "touch ${ran}"\nHost zz`, 'x * y', ID];
    const fake = await platform(hostile, hostKey);
    try {
      const gpu = gpuAt(fake.url, join(dir, 'hostile-config'));
      const written = await gpu(['ssh-config', '--write'], { env: { GPU_TOKEN: 't', HOME: home } });
      expect(written.code, written.stderr).toBe(0);
      expect(written.stderr).toContain('2 session IDs the platform answered are no session IDs: left out');
      const config = readFileSync(join(home, '.ssh', 'config'), 'utf8');
      expect(config).not.toMatch(/Match|\*/);
      expect(config).toContain(`HostName ${ID}`);
      await run('ssh', ['-G', '-F', join(home, '.ssh', 'config'), 'github.com']).catch(() => undefined);
      expect(existsSync(ran)).toBe(false);
    } finally {
      fake.close();
    }
    expect(() => hostBlocks(['x\nMatch all'], { gpu: ['gpu'], knownHosts: '/k' })).toThrow(/not a session ID/);
  });

  it('writes no host key of more than one key into the known_hosts ssh trusts', async () => {
    const fake = await platform([ID], `${hostKey}\n@cert-authority * ssh-ed25519 AAAA`);
    try {
      const config = join(dir, 'hostile-key-config');
      const gpu = gpuAt(fake.url, config);
      const answer = await gpu(['ssh-config', ID], { env: { GPU_TOKEN: 't' } });
      expect(answer.code).not.toBe(0);
      expect(answer.stderr).toContain('not one key');
      expect(existsSync(join(config, 'known_hosts'))).toBe(false);
    } finally {
      fake.close();
    }
  });
});

describe('the marked block in ~/.ssh/config', () => {
  const home = join(dir, 'home');
  const config = join(home, '.ssh', 'config');
  const mine = ['Host *', '  ServerAliveInterval 30', '', 'Host build', '  HostName build.example', ''].join('\n');
  const block = (ids: string[]) => markedBlock(hostBlocks(ids, { gpu: GPU, knownHosts: '/k' }));

  it('is added at the end of a config, replaced in place, emptied, the rest kept byte for byte', () => {
    expect(readOrEmpty(config)).toBe('');
    // None yet: a new file of its own, in a new ~/.ssh (0700), 0600.
    writeWhole(config, replaceMarkedBlock(readOrEmpty(config), block([ID])), 0o600);
    expect(readFileSync(config, 'utf8')).toBe(block([ID]));
    expect(statSync(config).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, '.ssh')).mode & 0o777).toBe(0o700);

    writeFileSync(config, mine.trimEnd());
    chmodSync(config, 0o644);
    writeWhole(config, replaceMarkedBlock(readOrEmpty(config), block([ID])), 0o600);
    expect(readFileSync(config, 'utf8')).toBe(`${mine}\n${block([ID])}`);
    // Lines the user adds after it stay after it.
    writeFileSync(config, `${readFileSync(config, 'utf8')}\nHost late\n  User me\n`);
    writeWhole(config, replaceMarkedBlock(readOrEmpty(config), block([OTHER, ID])), 0o600);
    expect(readFileSync(config, 'utf8')).toBe(`${mine}\n${block([OTHER, ID])}\nHost late\n  User me\n`);
    // Its mode is the user's.
    expect(statSync(config).mode & 0o777).toBe(0o644);
    writeWhole(config, replaceMarkedBlock(readOrEmpty(config), markedBlock('')), 0o600);
    expect(readFileSync(config, 'utf8')).toBe(`${mine}\n${BEGIN_MARKER}\n${END_MARKER}\n\nHost late\n  User me\n`);
  });

  it('writes through a symbolic link to the file it names, and refuses a block whose end is gone', () => {
    const real = join(dir, 'dotfiles', 'ssh_config');
    mkdirSync(join(dir, 'dotfiles'));
    writeFileSync(real, mine);
    const linked = join(dir, 'linked-home', '.ssh', 'config');
    mkdirSync(join(dir, 'linked-home', '.ssh'), { recursive: true });
    symlinkSync(real, linked);
    writeWhole(linked, replaceMarkedBlock(readOrEmpty(linked), block([ID])), 0o600);
    expect(lstatSync(linked).isSymbolicLink()).toBe(true);
    expect(readFileSync(real, 'utf8')).toBe(`${mine}\n${block([ID])}`);

    expect(() => replaceMarkedBlock(`${mine}${BEGIN_MARKER}\nHost x\n`, block([ID]))).toThrow(/mend it by hand/);
  });
});
