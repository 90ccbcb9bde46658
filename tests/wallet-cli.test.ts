/**
 * `pnpm wallet` as a user meets it before anything reaches the chain: `--help` is usage and success; a bad flag, a
 * keypair file that is not there, a platform that does not answer and a data folder without test wallets are each one
 * line on standard error, without a stack trace, and a non-zero exit (`pnpm wallet: ...` for what it checks itself,
 * `gpu: ...` for what `gpu wallet`, which runs its wallet commands, says); it looks for the platform's gateway where
 * PLATFORM_PORT_BASE or GATEWAY_URL put it, and for the local chain's files where PLATFORM_DATA_DIR does, as
 * `pnpm start` and `pnpm demo` do; `new` writes a new keypair and never replaces one. (A wrong password, a deposit from
 * a test wallet, and four users funded with new addresses and depositing through the gateway alone, against a running
 * platform, are in tests/start.test.ts; an API key, a sign-in for one command that leaves none behind and an address
 * of no wallet of the user's, against the real services, in tools/cli/test/accounts.test.ts.)
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { root } from './support/platform-start.ts';

// Ports where nothing listens: past the test servers (TEST_PORT_BASE+0..9) and between the test platforms (+10..20,
// +30..40, +60..70).
const nowhere = String((process.env.TEST_PORT_BASE ? Number(process.env.TEST_PORT_BASE) : 28000) + 50);

/** `pnpm wallet ...` with `env` (and none of the caller's GPU_ or platform settings): exit code, stdout, stderr. */
async function wallet(args: string[], env: Record<string, string> = {}) {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(GPU_|PLATFORM_|GATEWAY_URL|SOLANA_RPC_URL)/.test(k)),
  );
  return promisify(execFile)('pnpm', ['--silent', 'wallet', ...args], {
    cwd: root,
    env: { ...clean, ...env },
    timeout: 60_000,
  }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

/** One line on standard error (from pnpm wallet itself, or from gpu), no stack trace. */
const oneLine = (stderr: string, from = 'pnpm wallet') => {
  expect(stderr).toMatch(new RegExp(`^${from}: [^\n]+\n$`));
  expect(stderr).not.toMatch(/\n\s+at /);
};

describe('pnpm wallet', () => {
  it('prints its usage for --help and exits 0', async () => {
    const res = await wallet(['--help']);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^usage: pnpm wallet <command> \.\.\.: gpu wallet/);
    expect(res.stdout).toContain('pnpm wallet deposit (--keypair FILE | --test-wallet NAME) --amount TOKENS');
    expect(res.stdout).toContain('--test-wallet NAME');
    expect(res.stderr).toBe('');
  });

  it('refuses a flag it does not know in one line, exit 2', async () => {
    const res = await wallet(['balance', '--walet', 'x'], { GPU_TOKEN: 'x' });
    expect(res.code).toBe(2);
    oneLine(res.stderr);
    expect(res.stderr).toContain("Unknown option '--walet'");
  });

  it('says in one line that the keypair file is not there, exit 1', async () => {
    const file = path.join(tmpdir(), 'no-such-keypair.json');
    const res = await wallet(['open', '--keypair', file], { GPU_TOKEN: 'x' });
    expect(res.code).toBe(1);
    oneLine(res.stderr, 'gpu');
    expect(res.stderr).toContain(`cannot read the keypair ${file}: ENOENT`);
  });

  it('looks for the gateway at PLATFORM_PORT_BASE+10, not for billing, and says in one line that nothing answers', async () => {
    const res = await wallet(['balance', '--wallet', '6f1c0b5e-1f0a-4c4e-9a55-0d6f3c1a2b3c'], {
      GPU_TOKEN: 'x',
      PLATFORM_PORT_BASE: nowhere,
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toBe(
      `gpu: cannot reach the platform at http://127.0.0.1:${Number(nowhere) + 10} (from PLATFORM_PORT_BASE and ` +
        'PLATFORM_HOST): ECONNREFUSED\n',
    );
  });

  it('goes to GATEWAY_URL (or --url) for auth and billing alike', async () => {
    const gateway = `http://127.0.0.1:${Number(nowhere) + 7}`;
    const login = await wallet(['balance', '--wallet', 'w', '--email', 'a@example.com', '--password', 'p'], {
      GATEWAY_URL: gateway,
    });
    expect(login.code).toBe(1);
    oneLine(login.stderr);
    expect(login.stderr).toContain(`ECONNREFUSED 127.0.0.1:${Number(nowhere) + 7}`);
    const flag = await wallet(['balance', '--wallet', 'w', '--url', gateway], { GPU_TOKEN: 'x' });
    expect(flag.stderr).toBe(`gpu: cannot reach the platform at ${gateway} (given with --url): ECONNREFUSED\n`);
    const env = await wallet(['balance', '--wallet', 'w'], { GPU_TOKEN: 'x', GATEWAY_URL: gateway });
    expect(env.stderr).toBe(flag.stderr);
  });

  it('passes each option on to the command that takes it, and refuses one the command does not use', async () => {
    // A gateway that records what it is asked: a user with no wallet, and 404 to anything else.
    const asked: string[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => {
        body += d;
      });
      req.on('end', () => {
        asked.push(`${req.method} ${req.url} ${body}`);
        // The user's wallets: none.
        if (req.method === 'GET' && req.url?.startsWith('/api/v1/wallet?')) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end('[]');
          return;
        }
        res.writeHead(404, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ type: 'about:blank', title: 'Not Found', status: 404, code: 'NOT_FOUND' }));
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const gateway = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const address = '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin';
    try {
      const run = async (args: string[], env: Record<string, string> = { GPU_TOKEN: 'x' }) => {
        asked.length = 0;
        return { ...(await wallet(args, { GATEWAY_URL: gateway, ...env })), asked: [...asked] };
      };
      // The balance of the wallet at an address (not the default wallet's).
      const balance = await run(['balance', '--address', address]);
      expect(balance.code).toBe(1);
      expect(balance.stderr).toContain(address);
      // A transfer made elsewhere, claimed for the wallet at an address: that address is named.
      const claim = await run(['deposit', '--signature', 'sig', '--address', address]);
      expect(claim.code).toBe(1);
      expect(claim.stderr).toContain(address);
      // An option the command does not take, or two wallets named at once: a usage error, nothing asked.
      for (const args of [
        ['deposit', '--signature', 'sig', '--keypair', '/nonexistent.json'],
        ['balance', '--amount', '5'],
        ['balance', '--wallet', 'w', '--address', address],
        ['claim', '--signature', 'sig', '--wallet', 'w', '--address', address],
        ['open', '--keypair', 'k.json', '--address', address],
      ]) {
        const refused = await run(args);
        expect(refused.code, args.join(' ')).toBe(2);
        oneLine(refused.stderr);
        expect(refused.asked, args.join(' ')).toEqual([]);
      }
      // A deposit from a keypair into a wallet named by ID: both taken (the keypair here is not there to read).
      const into = await run(['deposit', '--keypair', '/nonexistent.json', '--amount', '1', '--wallet', 'w']);
      expect(into.code).toBe(1);
      expect(into.stderr).toContain('cannot read the keypair /nonexistent.json');
      // A command passed to gpu as it is signs in with --email/--password for it alone.
      const list = await run(['list', '--email', 'someone@example.com', '--password', 'secret-pass'], {});
      expect(list.code).toBe(1);
      expect(list.stderr).not.toContain('unknown option');
      expect(list.asked.join('\n')).toMatch(/POST \/api\/v1\/auth\/login .*someone@example\.com/);
    } finally {
      server.close();
    }
  });

  it('writes a new keypair (mode 0600) with new, and never replaces one', async () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'wallet-new-')), 'me.json');
    const made = await wallet(['new', '--keypair', file]);
    expect(made.code, made.stderr).toBe(0);
    const { address, keypair_file } = JSON.parse(made.stdout) as { address: string; keypair_file: string };
    expect(keypair_file).toBe(file);
    expect(address).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const secret = readFileSync(file, 'utf8');
    expect(JSON.parse(secret)).toHaveLength(64);
    const again = await wallet(['new', '--keypair', file]);
    expect(again.code).toBe(1);
    oneLine(again.stderr);
    expect(again.stderr).toContain(`cannot write ${file}: it exists`);
    expect(readFileSync(file, 'utf8')).toBe(secret);
  });

  it('funds an address only from a data folder with a local chain, and says in one line when there is none', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'wallet-data-'));
    const address = ['fund', '--address', 'XtUxfzXMF9MZ6YroLEHTEMSqXHHqNWcD1aABWf8Q7ih'];
    const none = await wallet(address, { PLATFORM_DATA_DIR: dataDir });
    expect(none.code).toBe(1);
    oneLine(none.stderr);
    expect(none.stderr).toContain(`no local chain in ${path.join(dataDir, 'solana', 'mint.json')}`);
    const neither = await wallet(['fund']);
    expect(neither.code).toBe(2);
    oneLine(neither.stderr);
    const bad = await wallet(['fund', '--address', 'not-an-address']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe('pnpm wallet: not a Solana address: not-an-address\n');
  });

  it("takes a test wallet from PLATFORM_DATA_DIR's local chain, and says in one line when there is none", async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'wallet-data-'));
    const res = await wallet(['open', '--test-wallet', 'wallet-1'], { GPU_TOKEN: 'x', PLATFORM_DATA_DIR: dataDir });
    expect(res.code).toBe(1);
    oneLine(res.stderr);
    expect(res.stderr).toContain(`no test wallets in ${path.join(dataDir, 'solana', 'wallets.json')}`);
  });
});
