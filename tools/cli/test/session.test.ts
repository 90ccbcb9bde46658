/**
 * The saved sign-in as a run that lasts (`gpu port-forward`) uses it, against the real auth service with no reuse
 * grace for refresh tokens: its access token renewed before it expires, with the refresh token another run saved
 * meanwhile (the one this run read at its start was spent by then, and using it again would sign everyone out).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerAndLogin, testConfig, useAuth } from '../../../services/auth/test/helpers.ts';
import { readConfig, writeConfig } from '../src/config.ts';
import { tokenSource } from '../src/session.ts';
import { CLI_TEST_MS, gpuAt } from './support/gpu.ts';

const auth = useAuth(testConfig({ jwt: { access_token_expire_minutes: 1, refresh_reuse_interval: '0s' } }));
const dir = mkdtempSync(join(tmpdir(), 'gpu-session-'));
let url = '';

beforeAll(async () => {
  url = await auth.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.useRealTimers());

describe('a saved sign-in in a run that lasts', () => {
  it('renews its access token before it expires, with the refresh token saved last', async () => {
    const { tokens } = await registerAndLogin(auth.app, { roles: ['renter'] });
    const env = { GPU_CONFIG_DIR: join(dir, 'config') };
    writeConfig(env, { url, refresh_token: tokens.refresh_token });

    const lasting = tokenSource(url, env, readConfig(env));
    const first = await lasting.get();
    expect(await lasting.get()).toBe(first);
    // Another run (an ssh-proxy) uses the saved token and saves the next.
    const saved = readConfig(env).refresh_token;
    await tokenSource(url, env, readConfig(env)).get();
    expect(readConfig(env).refresh_token).not.toBe(saved);

    // Half a minute on (of a minute's token): due for renewal.
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + 31_000);
    const renewed = await lasting.get();
    expect(renewed).not.toBe(first);
    // Signed in still: the token saved now refreshes again.
    expect(await tokenSource(url, env, readConfig(env)).get()).toEqual(expect.any(String));
  });
});

describe('a saved sign-in and a platform a run names instead', () => {
  it('never sends the saved API key or refresh token to another --url or GPU_URL, nor forgets them there', {
    timeout: CLI_TEST_MS,
  }, async () => {
    const seen: string[] = [];
    const elsewhere = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => {
        body += chunk;
      });
      req.on('end', () => {
        seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''} ${body}`);
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"status":401,"code":"INVALID_TOKEN"}');
      });
    });
    await new Promise<void>((resolve) => elsewhere.listen(0, '127.0.0.1', resolve));
    const other = `http://127.0.0.1:${(elsewhere.address() as AddressInfo).port}`;
    try {
      const config = join(dir, 'saved-elsewhere');
      const env = { GPU_CONFIG_DIR: config };
      const savedFile = () => readFileSync(join(config, 'config.json'), 'utf8');
      for (const secret of [{ api_key: 'gpk_the-saved-key' }, { refresh_token: 'the-saved-refresh-token' }]) {
        writeConfig(env, { url, ...secret });
        const before = savedFile();
        const gpu = gpuAt(url, config);
        for (const run of [
          () => gpu(['--url', other, 'whoami']),
          () => gpu(['whoami'], { env: { GPU_URL: other } }),
          () => gpu(['--url', other, 'logout']),
        ]) {
          const answer = await run();
          expect(answer.code).not.toBe(0);
          expect(answer.stderr).toContain(`the saved sign-in is for ${url}`);
        }
        expect(seen.join('\n')).not.toMatch(/the-saved/);
        expect(savedFile()).toBe(before);
      }
    } finally {
      elsewhere.close();
    }
  });
});
