/**
 * The README's start line: `pnpm start` brings every service up healthy on
 * embedded defaults (local S3 store, local Solana chain, PGlite databases, tokens signed with a key made in the data
 * folder), listening on loopback only, a second `pnpm start` on the same data folder or ports is refused while it
 * runs, a service that crashes is started again while the others keep running, Ctrl-C (SIGINT) stops everything
 * cleanly with its own last line, and a start-up that fails stops what it had started. Its terminal shows start-up,
 * warnings, errors and a summary each minute; every request's JSON line goes to the log files in the data folder.
 */
import { execFile, spawn } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { connect } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { gatherOutput } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { Decimal } from 'decimal.js';
import { afterAll, describe, expect, it } from 'vitest';
import { faultProxy, type Seen } from '../tools/cli/test/support/fault-proxy.ts';
import { findNginx } from '../tools/gateway/src/nginx.ts';
import {
  callEveryService,
  forgedToken,
  health,
  isAlive,
  live,
  platformPlace,
  root,
  runStart,
  services,
  startedPids,
  startPlatform,
} from './support/platform-start.ts';

const run = promisify(execFile);
const place = platformPlace(0);
const { ports, env: platformEnv } = place;
// At the services' own log level, as a person runs it: each request's line goes to the log files, not the terminal.
const platform = startPlatform(place, { LOG_LEVEL: 'info' });
const { child, dataDir, exited } = platform;

afterAll(async () => {
  // SIGTERM lets `pnpm start` stop its services; SIGKILL would leave them running, holding the ports.
  if (child.exitCode === null) child.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
  if (child.exitCode === null) child.kill('SIGKILL');
});

/** curl with the given arguments: the HTTP status and the body. */
async function curl(args: string[]): Promise<{ status: number; body: string }> {
  const out = path.join(dataDir, 'curl-body');
  rmSync(out, { force: true });
  const { stdout } = await run('curl', ['-s', '-o', out, '-w', '%{http_code}', ...args]);
  return { status: Number(stdout), body: existsSync(out) ? readFileSync(out, 'utf8') : '' };
}

let gatewayRenter: Promise<{ email: string; password: string }> | undefined;
/**
 * One renter registered through the gateway for the tests of API keys and of the command line: every sign-up from
 * this machine counts against auth's limit per address (on loopback alone `pnpm start` sets 1000 an hour, auth's own
 * is 10), which the demo and the wallet tests use too.
 */
/** The `gpu` command line against the platform's gateway, with its configuration in `configDir`. */
function gpuCli(configDir: string) {
  return (args: string[], env: Record<string, string> = {}) =>
    run('pnpm', ['-s', 'gpu', ...args], {
      cwd: root,
      env: { ...process.env, GPU_URL: `http://127.0.0.1:${ports.gateway}`, GPU_CONFIG_DIR: configDir, ...env },
    }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (err: { code?: number; stdout?: string; stderr?: string }) => ({
        code: err.code ?? -1,
        stdout: err.stdout ?? '',
        stderr: err.stderr ?? '',
      }),
    );
}

/** The code in the newest mail to `to` with `subject`, read as a person does with `pnpm mail`. */
async function mailedCode(to: string, subject: string): Promise<string> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const { stdout } = await run('pnpm', ['-s', 'mail', '--to', to, '--last', '20', '--json'], {
      cwd: root,
      env: { ...process.env, PLATFORM_DATA_DIR: dataDir },
    });
    const mail = (JSON.parse(stdout) as { subject: string; text: string }[]).filter((m) => m.subject === subject).pop();
    const code = mail && /Your code:\s+(\S+)/.exec(mail.text)?.[1];
    if (code) return code;
    if (Date.now() > deadline) throw new Error(`no mail "${subject}" to ${to}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function renterOfTheGateway(): Promise<{ email: string; password: string }> {
  gatewayRenter ??= (async () => {
    const email = `gateway-renter-${Date.now()}@example.com`;
    const password = 'a long passphrase';
    const registered = await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/auth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password, roles: ['renter'] }),
    });
    expect(registered.status).toBe(201);
    return { email, password };
  })();
  return gatewayRenter;
}

describe('pnpm start', () => {
  it('brings every service up healthy on embedded defaults', { timeout: 180_000 }, async () => {
    expect(services.length).toBeGreaterThan(0);
    expect(await platform.untilHealthy(), `not healthy:\n${platform.output().slice(-4000)}`).toEqual([]);
    expect(existsSync(path.join(dataDir, 'storage', 'config.yaml'))).toBe(true);
    // The gateway: nginx on deploy/gateway's files where nginx is installed (the test setup installs it).
    const nginx = findNginx();
    const gateway =
      nginx && !nginx.tooOld
        ? `[start] gateway: nginx ${nginx.version} (${nginx.path}) on deploy/gateway's files`
        : '[start] gateway: the Node gateway (tools/gateway; ';
    expect(platform.output()).toContain(gateway);
    // Either engine counts each answer in its metrics, served to operators (this machine) at /metrics.
    const gw = (p: string) => fetch(`http://127.0.0.1:${ports.gateway}${p}`);
    // nginx hands each request's line to the telemetry receiver over UDP, which a busy machine may drop (a lost line
    // loses its count, never the request): each try asks again until one is counted.
    await expect
      .poll(
        async () => {
          expect((await gw('/api/v1/pricing/rates')).status).toBe(200);
          return (await (await gw('/metrics')).text()).match(
            /^gateway_requests_total\{[^}]*route="\/api\/v1\/pricing\/\*"[^}]*\} \d+$/m,
          );
        },
        { timeout: 60_000, interval: 500 },
      )
      .not.toBeNull();
  });

  it("keeps each request's JSON line in the data folder's log files, off the terminal, which shows warnings in short and no start-up race", {
    timeout: 60_000,
  }, async () => {
    const logs = path.join(dataDir, 'logs');
    expect(platform.output()).toContain(
      `[start] logs: each process's output in ${path.join(logs, '<name>.log')} (a service's requests there too, ` +
        'one JSON line each)',
    );
    expect((await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/pricing/rates`)).status).toBe(200);
    const requestLine = (text: string) =>
      text
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { msg?: string; req?: { url?: string } })
        .find((entry) => entry.msg === 'incoming request' && entry.req?.url === '/api/v1/pricing/rates');
    await expect
      .poll(() => requestLine(readFileSync(path.join(logs, 'billing.log'), 'utf8')), { timeout: 20_000 })
      .toBeDefined();
    expect(statSync(path.join(logs, 'billing.log')).mode & 0o777).toBe(0o600);
    const output = platform.output();
    expect(output).not.toContain('"msg":"incoming request"');
    // No log line at the terminal as JSON: a warning or an error is one short line (`[auth] warn: ...`).
    expect(output).not.toMatch(/^\[[a-z-]+\] \{/m);
    // A fresh store's first write into a bucket not made yet, and the first events before their receivers listen,
    // are no failures.
    expect(output).not.toContain('non-retryable streaming request');
    expect(output).not.toContain('event publish');
  });

  it('signs tokens with an EdDSA key made in the data folder: the admin calls all four services, a forged token is 401', {
    timeout: 60_000,
  }, async () => {
    expect(statSync(path.join(dataDir, 'auth', 'jwt-signing-key.pem')).mode & 0o777).toBe(0o600);
    const token = await platform.adminToken();
    const { statuses, quote, providerId } = await callEveryService(ports, token);
    expect(statuses, JSON.stringify(quote)).toEqual({ auth: 200, storage: 200, registry: 201, billing: 200 });
    // Billing priced the machine from its record at the registry, read with the platform's machine client.
    expect(quote).toMatchObject({ provider_id: providerId, requested_vram_mb: 81920 });
    expect((await callEveryService(ports, forgedToken(token))).statuses).toEqual({
      auth: 401,
      storage: 401,
      registry: 401,
      billing: 401,
    });
  });

  it("takes more sign-ups an hour from this machine than auth's default 10, on loopback alone", {
    timeout: 60_000,
  }, async () => {
    expect(await platform.untilHealthy()).toEqual([]);
    // Every caller is 127.0.0.1 here: auth's 10 an hour would be spent by two runs of pnpm demo (four each).
    for (let n = 1; n <= 11; n++) {
      const registered = await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/auth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: `sign-up-${n}-${Date.now()}@example.com`, password: 'a long passphrase' }),
      });
      expect(registered.status, `sign-up ${n}: ${await registered.text()}`).toBe(201);
    }
  });

  it('listens on loopback only: no port of it answers on another address of the machine', async (ctx) => {
    const outside = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    if (!outside) ctx.skip();
    const answers = (port: number, host: string) =>
      new Promise<boolean>((resolve) => {
        const socket = connect(port, host);
        socket.setTimeout(3000, () => socket.destroy(new Error('timeout')));
        socket.once('connect', () => {
          socket.destroy();
          resolve(true);
        });
        socket.once('error', () => resolve(false));
      });
    // Every port it opened: the services, the S3 store, the chain's RPC and WebSocket, the gateway (no NATS: that is
    // PLATFORM_NATS=embedded's).
    const opened = Object.entries(ports)
      .filter(([name]) => name !== 'nats')
      .map(([, port]) => port);
    for (const port of opened) expect(await answers(port, '127.0.0.1'), `${port} on 127.0.0.1`).toBe(true);
    for (const port of opened) expect(await answers(port, outside as string), `${port} on ${outside}`).toBe(false);
    const up = `[start] up: gateway http://127.0.0.1:${ports.gateway} (every public path, one origin); auth http://127.0.0.1:${ports.auth} (docs /docs)`;
    expect(await platform.untilPrinted(up)).toContain(up);
  });

  it('refuses a second pnpm start on its data folder, or on its ports, in one line, starting nothing', {
    timeout: 60_000,
  }, async () => {
    const sameFolder = await runStart(platformEnv(dataDir));
    expect(sameFolder.code, sameFolder.output).toBe(1);
    expect(sameFolder.output).toMatch(
      new RegExp(
        `^\\[start\\] refused: the data folder ${dataDir} is in use by another pnpm start \\(pid ${child.pid}\\)[^\\n]*\\n$`,
      ),
    );
    const otherFolder = await runStart(platformEnv(mkdtempSync(path.join(tmpdir(), 'platform-second-'))));
    expect(otherFolder.code, otherFolder.output).toBe(1);
    expect(otherFolder.output).toMatch(
      /^\[start\] refused: ports in use on 127\.0\.0\.1: [^\n]*: stop what holds them, or set PLATFORM_PORT_BASE\n$/,
    );
    // Each port with the process that holds it: the first platform's.
    const [authPid] = startedPids(platform.output(), 'auth');
    const [s3Pid] = startedPids(platform.output(), 's3');
    expect(otherFolder.output).toMatch(
      new RegExp(`${ports.auth} \\(auth\\) by pid ${authPid} \\(node [^)]* services/auth/dist/src/server\\.js\\)`),
    );
    expect(otherFolder.output).toMatch(new RegExp(`${ports.s3} \\(s3\\) by pid ${s3Pid} \\(node [^)]*s3-server`));
    // The first platform is untouched: the same processes, all healthy.
    for (const name of services) expect((await health(ports[name]))?.status, name).toBe(200);
    // The services, the S3 store, the chain, the mail catcher and the gateway (nginx with its telemetry receiver).
    const gatewayProcesses = /^\[start\] gateway: nginx /m.test(platform.output()) ? 2 : 1;
    expect(startedPids(platform.output()), platform.output()).toHaveLength(services.length + 3 + gatewayProcesses);
  });

  it('is secure by default: no token 401, the platform client and the initial admin get in', {
    timeout: 60_000,
  }, async () => {
    const url = (name: keyof typeof ports, p: string) => `http://127.0.0.1:${ports[name]}${p}`;
    const anonymous = await fetch(url('storage', '/objects/list'));
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect((await fetch(url('provider-registry', '/providers'))).status).toBe(401);

    // The platform's own service client, created at start-up with its secret in the data folder (mode 0600).
    const secretFile = path.join(dataDir, 'auth', 'clients', 'platform.json');
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const { client_id, client_secret } = JSON.parse(readFileSync(secretFile, 'utf8'));
    const token = await fetch(url('auth', '/api/v1/auth/token'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'client_credentials', client_id, client_secret }),
    });
    expect(token.status).toBe(200);
    const { access_token: serviceToken } = (await token.json()) as { access_token: string };
    const listed = await fetch(url('storage', '/objects/list'), {
      headers: { authorization: `Bearer ${serviceToken}` },
    });
    expect(listed.status).toBe(200);

    // The initial admin, with the password made at first start.
    const adminToken = await platform.adminToken();
    const providers = await fetch(url('provider-registry', '/providers'), {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(providers.status).toBe(200);
  });

  it('takes API keys through the gateway with curl: a key of offers searches them and starts nothing', {
    timeout: 60_000,
  }, async () => {
    const gw = (p: string) => `http://127.0.0.1:${ports.gateway}${p}`;
    const json = ['-H', 'content-type: application/json'];
    const { email, password } = await renterOfTheGateway();
    const login = await curl([
      '-X',
      'POST',
      gw('/api/v1/auth/login'),
      ...json,
      '-d',
      JSON.stringify({ email, password }),
    ]);
    const auth = `Authorization: Bearer ${JSON.parse(login.body).access_token}`;
    const created = await curl([
      '-X',
      'POST',
      gw('/api/v1/auth/keys'),
      '-H',
      auth,
      ...json,
      '-d',
      '{"name": "watch", "scopes": ["offers"]}',
    ]);
    expect(created.status).toBe(201);
    const apiKey = JSON.parse(created.body).api_key as string;
    expect(apiKey).toMatch(/^gpk_/);
    const token = await curl([
      '-X',
      'POST',
      gw('/api/v1/auth/token'),
      '-d',
      'grant_type=api_key',
      '-d',
      `api_key=${apiKey}`,
    ]);
    expect(token.status).toBe(200);
    const keyAuth = `Authorization: Bearer ${JSON.parse(token.body).access_token}`;
    expect((await curl(['-H', keyAuth, gw('/offers?gpu_model=H100')])).status).toBe(200);
    const start = await curl(['-X', 'POST', gw('/api/v1/billing/start-session'), '-H', keyAuth, ...json, '-d', '{}']);
    expect(start.status).toBe(403);
    expect(JSON.parse(start.body)).toMatchObject({ code: 'INSUFFICIENT_SCOPE', required_scope: 'sessions' });
  });

  // About 30 runs of the gpu command, each a Node start: 47 s on a quiet machine, past 120 s in a full run on a busy
  // one (CI failed so once). A deadline for a loaded machine, not for a hung one.
  it('runs the gpu command line through the gateway: sign in, a key, offers, and its refusals', {
    timeout: 360_000,
  }, async () => {
    const configDir = path.join(dataDir, 'gpu-cli');
    const { email, password } = await renterOfTheGateway();
    const gpu = gpuCli(configDir);
    const login = await gpu(['login', '--email', email], { GPU_PASSWORD: password });
    expect(login, login.stderr).toMatchObject({ code: 0 });
    // Who it is, kept 0600, holds a refresh token, never the password.
    const saved = readFileSync(path.join(configDir, 'config.json'), 'utf8');
    expect(statSync(path.join(configDir, 'config.json')).mode & 0o777).toBe(0o600);
    expect(saved).not.toContain(password);
    expect(JSON.parse((await gpu(['whoami', '--json'])).stdout)).toMatchObject({ email, roles: ['renter'] });
    const created = JSON.parse((await gpu(['keys', 'create', 'ci', '--scope', 'offers', '--json'])).stdout);
    expect(created.api_key).toMatch(/^gpk_/);
    const withKey = { GPU_API_KEY: created.api_key, GPU_CONFIG_DIR: path.join(configDir, 'none') };
    const offers = await gpu(['offers', '--gpu-model', 'H100', '--json'], withKey);
    expect(offers.code, offers.stderr).toBe(0);
    expect(Array.isArray(JSON.parse(offers.stdout))).toBe(true);
    // Told no URL, gpu finds this platform as pnpm start placed it: by its variables, or by the file in its folder.
    const found = (env: Record<string, string>) =>
      gpu(['offers', '--json'], { ...withKey, GPU_URL: '', PLATFORM_PORT_BASE: '', PLATFORM_HOST: '', ...env });
    expect((await found(platformEnv(dataDir))).code).toBe(0);
    expect((await found({ PLATFORM_DATA_DIR: dataDir })).code).toBe(0);
    // The key's scope ends at offers: one line with the code, exit status 1; the key itself is never printed.
    const sessions = await gpu(['sessions'], withKey);
    expect(sessions).toMatchObject({ code: 1 });
    // What to run next is a command: a key with that scope.
    expect(sessions.stderr).toBe(
      'gpu: INSUFFICIENT_SCOPE: this action needs an API key with the scope sessions (a new key with it: gpu keys ' +
        'create <name> --scope sessions)\n',
    );
    expect(sessions.stderr + sessions.stdout).not.toContain(created.api_key);
    expect((await gpu(['keys', 'revoke', created.key.id])).code).toBe(0);
    expect((await gpu(['offers'], withKey)).code).toBe(1);
    // Storage: a file up, listed, down again (to a file and to standard output), removed.
    const local = path.join(dataDir, 'cli-upload.csv');
    writeFileSync(local, 'step,loss\n1,0.5\n');
    const up = await gpu(['storage', 'cp', local, 'gpu:cli/data.csv', '--json']);
    expect(up.code, up.stderr).toBe(0);
    expect(JSON.parse(up.stdout)).toMatchObject({ key: 'cli/data.csv', size: 16 });
    const listed = JSON.parse((await gpu(['storage', 'ls', 'cli/', '--json'])).stdout);
    expect(listed.map((o: { key: string }) => o.key)).toEqual(['cli/data.csv']);
    expect((await gpu(['storage', 'cp', 'gpu:cli/data.csv', '-'])).stdout).toBe('step,loss\n1,0.5\n');
    const back = path.join(dataDir, 'cli-download.csv');
    expect((await gpu(['storage', 'cp', 'gpu:cli/data.csv', back])).code).toBe(0);
    expect(readFileSync(back, 'utf8')).toBe('step,loss\n1,0.5\n');
    expect((await gpu(['storage', 'rm', 'cli/data.csv'])).code).toBe(0);
    const gone = await gpu(['storage', 'cp', 'gpu:cli/data.csv', '-']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/^gpu: OBJECT_NOT_FOUND: /);
    // A quote of a machine that does not exist, and an end of a session that does not: one line each, exit status 1.
    const quote = await gpu(['quote', '--machine', '00000000-0000-4000-8000-000000000000', '--gpu-model', 'H100']);
    expect(quote).toMatchObject({ code: 1 });
    expect(quote.stderr).toMatch(/^gpu: PROVIDER_NOT_FOUND: /);
    expect((await gpu(['end', '00000000-0000-4000-8000-000000000000'])).stderr).toMatch(/^gpu: SESSION_NOT_FOUND: /);
    expect((await gpu(['storage', 'cp', 'a', 'b'])).code).toBe(2);
    // A usage error is exit status 2.
    expect((await gpu(['offers', '--sort', 'sideways'])).code).toBe(2);
    // A wallet (opened here through the gateway): how to deposit to it, from the platform's own chain; its history.
    const access = await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    const me = JSON.parse((await gpu(['whoami', '--json'])).stdout) as { id: string };
    const address = Keypair.generate().publicKey.toBase58();
    const opened = await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/wallet`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${access.access_token}` },
      body: JSON.stringify({ owner_type: 'user', owner_id: me.id, solana_address: address }),
    });
    expect(opened.status).toBe(201);
    const walletId = ((await opened.json()) as { id: string }).id;
    const deposit = await gpu(['wallet', 'deposit', walletId, '--json']);
    expect(deposit.code, deposit.stderr).toBe(0);
    const mint = JSON.parse(readFileSync(path.join(dataDir, 'solana', 'mint.json'), 'utf8')) as { mint: string };
    expect(JSON.parse(deposit.stdout)).toMatchObject({ from: address, address_proven: false, mint: mint.mint });
    expect((await gpu(['wallet', 'deposit', walletId])).stdout).toContain(`gpu wallet deposit ${walletId} --signature`);
    expect(JSON.parse((await gpu(['wallet', 'history', walletId, '--json'])).stdout)).toEqual([]);
    // Nothing to withdraw, no machine to rent, not a provider: one line each, exit status 1.
    const withdraw = await gpu(['wallet', 'withdraw', walletId, '--amount', '1']);
    expect(withdraw.code).toBe(1);
    expect(withdraw.stderr).toMatch(/^gpu: [A-Z_]+: [^\n]+\n$/);
    const nowhere = '00000000-0000-4000-8000-000000000000';
    const rent = await gpu(['rent', '--machine', nowhere, '--gpu-model', 'H100', '--wallet', walletId, '--', 'true']);
    expect(rent.stderr).toMatch(/^gpu: PROVIDER_NOT_FOUND: /);
    expect((await gpu(['machines'])).stderr).toMatch(/^gpu: ROLE_REQUIRED: /);
    // Signed in on this device (and by the logins above): listed, this one marked.
    const signIns = JSON.parse((await gpu(['sign-ins', '--json'])).stdout) as { current: boolean }[];
    expect(signIns.filter((s) => s.current)).toHaveLength(1);
    expect((await gpu(['logout'])).code).toBe(0);
    expect((await gpu(['whoami'])).stderr).toMatch(/not logged in/);
  });

  it('recovers an account through the gateway: codes from pnpm mail, the address verified, a forgotten password reset', {
    timeout: 120_000,
  }, async () => {
    const { email, password } = await renterOfTheGateway();
    const gpu = gpuCli(path.join(dataDir, 'gpu-recovery'));
    // The code auth mailed at sign-up, caught by pnpm start's mail catcher, verifies the address, sent with the
    // account's own sign-in (without one it would take a new password: services/auth/test/pre-hijacking.test.ts).
    expect((await gpu(['login', '--email', email], { GPU_PASSWORD: password })).code).toBe(0);
    const verified = await gpu(['email', 'verify', '--json'], {
      GPU_EMAIL_CODE: await mailedCode(email, 'Verify your e-mail address'),
    });
    expect(verified.stderr).toBe('');
    expect(verified).toMatchObject({ code: 0 });
    expect(JSON.parse(verified.stdout)).toMatchObject({ email, email_verified: true });
    // Forgotten: a known and an unknown address get the same answer; only the known one gets a code.
    const known = await gpu(['password', 'forgot', '--email', email, '--json']);
    const unknown = await gpu(['password', 'forgot', '--email', `nobody-${Date.now()}@example.com`, '--json']);
    expect(known.stderr).toBe('');
    expect(known).toMatchObject({ code: 0 });
    expect(unknown.stdout).toBe(known.stdout);
    const code = await mailedCode(email, 'Reset your password');
    const next = 'a brand new passphrase, reset';
    const reset = await gpu(['password', 'reset'], { GPU_RESET_CODE: code, GPU_NEW_PASSWORD: next });
    expect(reset, reset.stderr).toMatchObject({ code: 0 });
    // The code worked once; the old password no longer does, the new one does, and the address stays verified.
    const again = await gpu(['password', 'reset'], { GPU_RESET_CODE: code, GPU_NEW_PASSWORD: next });
    expect(again.stderr).toMatch(/^gpu: INVALID_EMAIL_TOKEN: /);
    expect((await gpu(['login', '--email', email], { GPU_PASSWORD: password })).stderr).toMatch(/INVALID_CREDENTIALS/);
    expect((await gpu(['login', '--email', email], { GPU_PASSWORD: next })).code).toBe(0);
    expect(JSON.parse((await gpu(['whoami', '--json'])).stdout)).toMatchObject({ email, email_verified: true });
  });

  it('has an embedded store that checks signatures as S3 does, and downloads by redirect, tried with plain curl', {
    timeout: 60_000,
  }, async () => {
    const url = (name: keyof typeof ports, p: string) => `http://127.0.0.1:${ports[name]}${p}`;
    const store = `http://127.0.0.1:${ports.s3}`;
    const auth = `Authorization: Bearer ${await platform.adminToken()}`;
    const file = path.join(dataDir, 'curl-upload.txt');
    writeFileSync(file, 'hello from curl');
    // Through the storage service: an upload into the default bucket, under a folder, and a presigned GET URL.
    const key = 'users/someone/notes.txt';
    expect(await curl(['-H', auth, '-T', file, url('storage', `/objects/platform-data/${key}`)])).toMatchObject({
      status: 201,
    });
    const presign = await curl([
      '-H',
      auth,
      '-H',
      'content-type: application/json',
      '-d',
      '{"method":"GET"}',
      url('storage', `/presigned-url/platform-data/${key}`),
    ]);
    expect(presign.status).toBe(200);
    const getUrl = (JSON.parse(presign.body) as { url: string }).url;
    expect(getUrl.startsWith(`${store}/platform-data/${key}?`)).toBe(true);

    expect(await curl([getUrl])).toEqual({ status: 200, body: 'hello from curl' });
    expect((await curl([`${store}/platform-data/${key}`])).status).toBe(403);
    const other = path.join(dataDir, 'curl-other.txt');
    writeFileSync(other, 'overwritten');
    expect((await curl(['-X', 'PUT', '--upload-file', other, getUrl])).status).toBe(403);
    expect((await curl(['-X', 'DELETE', getUrl])).status).toBe(403);
    expect((await curl([getUrl.replace(/X-Amz-Signature=[0-9a-f]{4}/, 'X-Amz-Signature=0000')])).status).toBe(403);
    expect(await curl([getUrl])).toEqual({ status: 200, body: 'hello from curl' });

    // A download by redirect: 307 to the store, which plain curl follows to the bytes.
    const redirect = url('storage', `/objects/platform-data/${key}?redirect=true`);
    expect((await curl(['-H', auth, redirect])).status).toBe(307);
    expect(await curl(['-L', '-H', auth, redirect])).toEqual({ status: 200, body: 'hello from curl' });

    // A one-level listing of the default bucket's top level: its keys all lie in users/{id}/.
    const top = await curl(['-H', auth, url('storage', '/objects/platform-data/list?recursive=false')]);
    expect(top.status).toBe(200);
    expect((JSON.parse(top.body) as Array<{ key: string }>).map((e) => e.key)).toEqual(['users/']);
  });

  it('runs pnpm demo on it: a market of two renters on one machine, sign-up to on-chain payout, reconciled; a job survives the loss of its machine', {
    timeout: 720_000,
  }, async () => {
    const demo = await run('pnpm', ['-s', 'demo'], {
      cwd: root,
      env: { ...process.env, ...platformEnv(dataDir) },
      timeout: 710_000,
    }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`pnpm demo failed: ${err.message}\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
    });
    // Its length, said once at its start; the running platform used, not a second one started.
    expect(demo.stdout).toMatch(/^\[demo +[\d.]+s\] pnpm demo: about \d+ minutes;/);
    expect(demo.stdout.match(/about \d+ minutes/g)).toHaveLength(1);
    expect(demo.stdout).toMatch(/platform: using the one running/);
    // Under its steps, the gpu commands they stand for, with the step's own values.
    const summaryLine = /^DEMO OK (.*)$/m.exec(demo.stdout)?.[1] ?? '{}';
    const machine = (JSON.parse(summaryLine) as { provider_id?: string }).provider_id;
    expect(demo.stdout).toContain(`\n           $ pnpm gpu quote --machine ${machine} --gpu-model H100 --gpus 4\n`);
    expect(demo.stdout).toMatch(/^ {11}\$ pnpm gpu offers --gpu-model H100 --min-free-gpus 4 /m);
    // At its end, what it made and no one else could use is gone from the platform, and what stays is named.
    expect(demo.stdout).toMatch(
      /^\[demo\] tidied up: the machines demo-rig \(\S+\) and demo-rig-2 \(\S+\) taken off the market, 2 daemon credentials revoked$/m,
    );
    expect(demo.stdout).toMatch(/^\[demo\] left in the data folder .*: the accounts demo-provider-\w+@example\.com, /m);
    const admin = await platform.adminToken();
    const gone = await fetch(`http://127.0.0.1:${ports['provider-registry']}/providers/${machine}`, {
      headers: { authorization: `Bearer ${admin}` },
    });
    expect(gone.status).toBe(404);
    expect(demo.stdout.trimEnd().split('\n').at(-1)).toMatch(/^DEMO OK /);
    const summary = JSON.parse(/^DEMO OK (.*)$/m.exec(demo.stdout)?.[1] ?? 'null') as Record<string, string | number>;
    expect(summary, demo.stdout).not.toBeNull();
    // Started minutes of 4 of the 8 H100s at the provider's 200/GPU-hour plus VRAM and power (809.171796875 an
    // hour), rounded once; 5% fee. The market scene takes over a minute (the capped session ends once its first
    // minute is billed), so the renter's session runs two or three.
    const minutes = Number(summary.billed_minutes);
    expect([2, 3]).toContain(minutes);
    const cost = new Decimal('809.171796875').mul(minutes).div(60).toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
    expect(summary.total_cost).toBe(cost.toFixed(6));
    const fee = cost.mul('0.05').toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
    expect(summary.provider_earnings).toBe(cost.minus(fee).toFixed(6));
    // The capped session cost its cap exactly.
    expect(summary.capped_total_cost).toBe('15.000000');
    // The workload scene: a job of a few seconds on 2 GPUs billed one started minute at its session's rate (2 of the
    // 4 GPUs' figure: 404.5858984375 an hour), and the hour-long job its cap exactly.
    expect(summary.workload_billed_minutes).toBe(1);
    const jobCost = new Decimal(String(summary.workload_hourly_rate))
      .div(60)
      .toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
    expect(summary.workload_total_cost).toBe(jobCost.toFixed(6));
    const jobCap = new Decimal(String(summary.workload_hourly_rate))
      .div(60)
      .mul('1.05')
      .toDecimalPlaces(6, Decimal.ROUND_UP);
    expect(summary.capped_workload_total_cost).toBe(jobCap.toFixed(6));
    expect(summary.workload_output_key).toBe(`sessions/${summary.workload_session_id}/output/checksum.txt`);
    // The reach scene: an idle workload on 4 GPUs, billed its started minutes at the session's rate.
    const reachCost = new Decimal(String(summary.reach_hourly_rate))
      .mul(Number(summary.reach_billed_minutes))
      .div(60)
      .toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
    expect(summary.reach_total_cost).toBe(reachCost.toFixed(6));
    expect(Number(summary.reach_bytes_out)).toBeGreaterThan(0);
    // The spot scene: the job at a bid, raised to 70 per GPU-hour on 8 GPUs, taken back in its first minute by an
    // on-demand rental of 4, which ran one started minute at its rate.
    expect(summary).toMatchObject({ spot_end_reason: 'preempted', spot_total_cost: '9.333333' });
    const spotCost = new Decimal('9.333333');
    const winnerCost = new Decimal(String(summary.spot_winner_hourly_rate))
      .div(60)
      .toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
    expect(summary.spot_winner_total_cost).toBe(winnerCost.toFixed(6));
    // Every session's earnings (its cost less the 5% fee) were paid out on chain.
    const earnings = (c: Decimal) => c.minus(c.mul('0.05').toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN));
    const earned = [cost, new Decimal('15'), jobCost, jobCap, reachCost, spotCost, winnerCost].reduce(
      (sum, c) => sum.add(earnings(c)),
      new Decimal(0),
    );
    const payouts = summary.payout_amounts as unknown as string[];
    expect(payouts.reduce((sum, p) => sum.add(p), new Decimal(0)).toFixed(6)).toBe(earned.toFixed(6));
    // The first payout created the address's token account: the token account fee (0.5 by default) was withheld from
    // it and kept by the platform; the others sent their whole amount.
    const fees = summary.payout_fees as unknown as string[];
    expect(fees).toHaveLength(payouts.length);
    expect(fees.filter((f) => !new Decimal(f).isZero()).map((f) => new Decimal(f).toFixed(6))).toEqual(['0.500000']);
    expect(summary.payout_address_balance).toBe(earned.minus('0.5').toFixed(6));
    for (const signature of summary.payout_signatures as unknown as string[]) {
      expect(signature).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/);
    }
    // 900 deposited, the minutes paid (its session's, its two jobs', its reach session's and its bid's), the rest of
    // the holds released (no storage charge in so short a run).
    expect(summary.renter_available).toBe(
      new Decimal(900).minus(cost).minus(jobCost).minus(jobCap).minus(reachCost).minus(spotCost).toFixed(6),
    );
    // The demo's own reconciliation (read back from billing and the chain) held, every line of it: two per
    // session (seven), the payouts, two per paying renter (two), the payout address and the treasury.
    expect(summary.reconciled).toBe(21);
    expect(demo.stdout).not.toMatch(/FAIL/);
    expect(demo.stdout).toMatch(/renter found the machine on the market with its own token/);
    expect(demo.stdout).toMatch(/renter uploaded a dataset/);
    // The market scene: two renters share the 8-GPU machine, a third is refused, the daemon survives kill -9.
    expect(demo.stdout).toMatch(/session started: .*: GPUs 0, 1, 2, 3 of the machine/);
    expect(demo.stdout).toMatch(
      /second renter found the other 4 GPUs with its own token and rented them.* on GPUs 4, 5, 6, 7/,
    );
    expect(demo.stdout).toMatch(/third renter refused: 409 PROVIDER_NOT_AVAILABLE/);
    expect(demo.stdout).toMatch(/daemon restarted: same machine, the running session found, usage resumed/);
    expect(demo.stdout).toMatch(/second session ended at its spend cap: 15.000000 tokens/);
    // The workload scene: the job on 2 GPUs in the sandbox, its log followed, its output in storage, the capped job
    // stopped with no process left.
    expect(demo.stdout).toMatch(/workload job started: .* on GPUs 0, 1 of the machine, in the sandbox/);
    expect(demo.stdout).toMatch(/followed the job's log in storage while it ran: .*GPUs: GPU-/);
    expect(demo.stdout).toMatch(/the job exited, its session ended with it, its output in storage/);
    expect(demo.stdout).toMatch(
      /the hour-long job was stopped at its spend cap: .* exactly the cap; .* no process of it left/,
    );
    // The reach scene: a shell command in the rented sandbox, a page served from inside read through the gateway,
    // the stream cut at the session's end.
    expect(demo.stdout).toMatch(/these are your GPUs: .*the 4 leased, no other/);
    expect(demo.stdout).toMatch(/ports\/8000\/: 200 text\/html/);
    expect(demo.stdout).toMatch(/its port now answers: 409 SESSION_NOT_ACTIVE/);
    // The spot scene: the bid raised with gpu bid, taken back with notice, seen inside the workload and by gpu run.
    expect(demo.stdout).toMatch(/renter raises its bid/);
    expect(demo.stdout).toMatch(/bid per GPU-hour\s*│\s*70\.000000/);
    expect(demo.stdout).toMatch(/told to stop: \{"reason":"preempted"/);
    expect(demo.stdout).toMatch(/workload preempted at .* with 30 s notice .*: it (exited with 0|was stopped);/);
    // The jobs scene: the job's machine lost mid-job, the job succeeded on the other from its last checkpoint (its
    // second attempt counted on from the kept count, not from 0), the renter paying the two attempts and no more.
    expect(summary).toMatchObject({ job_state: 'succeeded', job_attempts: 2, job_lost_reason: 'provider_offline' });
    expect(Number(summary.job_checkpoint_count)).toBeGreaterThan(0);
    expect(Number(summary.job_resumed_from)).toBeGreaterThanOrEqual(Number(summary.job_checkpoint_count));
    expect(demo.stdout).toMatch(/the job succeeded on the other machine, from its last checkpoint/);
    expect(demo.stdout).toMatch(/the renter paid both attempts and nothing more/);
  });

  it('says each minute in which something happened what the services answered and how many sessions run', {
    timeout: 120_000,
  }, async () => {
    // Something to count (when this test runs alone, the minute might be quiet).
    expect((await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/pricing/rates`)).status).toBe(200);
    const line = /^\[start\] the last minute: .*$/m;
    expect(await platform.untilPrinted('[start] the last minute: ', 90_000)).toMatch(line);
    expect(platform.output().match(line)?.[0]).toMatch(
      /^\[start\] the last minute: (\d+ requests?|no requests) answered( \(\d+ with 5xx\))?, (\d+ sessions?|no sessions) running, (\d+ warnings?|no warnings) and (\d+ errors?|no errors) logged$/,
    );
  });

  it('refuses pnpm demo with another data folder before it creates anything, naming the folder', {
    timeout: 120_000,
  }, async () => {
    const demo = (folder: string) =>
      run('pnpm', ['-s', 'demo'], {
        cwd: root,
        env: { ...process.env, ...platformEnv(folder) },
        timeout: 110_000,
      }).then(
        (r) => ({ code: 0, output: `${r.stdout}${r.stderr}` }),
        (err: { code: number; stdout: string; stderr: string }) => ({
          code: err.code,
          output: `${err.stdout}${err.stderr}`,
        }),
      );
    // An empty folder: the platform answers, but its files are not there.
    const empty = mkdtempSync(path.join(tmpdir(), 'demo-other-'));
    const none = await demo(empty);
    expect(none.code, none.output).toBe(1);
    expect(none.output).toContain(
      `[demo] FAILED: no solana/mint.json, solana/treasury-keypair.json in the data folder`,
    );
    expect(none.output).toContain(`PLATFORM_DATA_DIR (${empty}) must be the data folder of the pnpm start running`);
    // Another platform's folder: its files are there, with another token.
    const other = mkdtempSync(path.join(tmpdir(), 'demo-other-'));
    for (const file of ['solana/treasury-keypair.json']) {
      mkdirSync(path.dirname(path.join(other, file)), { recursive: true });
      copyFileSync(path.join(dataDir, file), path.join(other, file));
    }
    const mint = JSON.parse(readFileSync(path.join(dataDir, 'solana', 'mint.json'), 'utf8'));
    const otherMint = 'So11111111111111111111111111111111111111112';
    writeFileSync(path.join(other, 'solana', 'mint.json'), JSON.stringify({ ...mint, mint: otherMint }));
    const foreign = await demo(other);
    expect(foreign.code, foreign.output).toBe(1);
    expect(foreign.output).toContain(
      `[demo] FAILED: billing takes deposits of the token ${mint.mint}, the data folder's chain made ${otherMint}`,
    );
    // Another platform's folder as it is: every local chain makes the same mint and treasury (fixed seeds), but its
    // auth service's signing key and platform client are its own.
    const twin = mkdtempSync(path.join(tmpdir(), 'demo-other-'));
    for (const file of ['solana/mint.json', 'solana/treasury-keypair.json']) {
      mkdirSync(path.dirname(path.join(twin, file)), { recursive: true });
      copyFileSync(path.join(dataDir, file), path.join(twin, file));
    }
    mkdirSync(path.join(twin, 'auth', 'clients'), { recursive: true });
    const key = generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' });
    writeFileSync(path.join(twin, 'auth', 'jwt-signing-key.pem'), key, { mode: 0o600 });
    const client = { client_id: randomUUID(), client_secret: 'not the platform client secret', role: 'service' };
    writeFileSync(path.join(twin, 'auth', 'clients', 'platform.json'), JSON.stringify(client), { mode: 0o600 });
    const twinned = await demo(twin);
    expect(twinned.code, twinned.output).toBe(1);
    expect(twinned.output).toMatch(
      /\[demo\] FAILED: the running platform signs tokens with no key of the data folder, nor takes its platform client \(.* answered 401 /,
    );
    expect(twinned.output).toContain(`PLATFORM_DATA_DIR (${twin}) must be the data folder of the pnpm start running`);
    // Nothing was created: no user signed up.
    for (const attempt of [none, foreign, twinned]) expect(attempt.output).not.toMatch(/signed up/);
  });

  it('stops pnpm demo on SIGTERM with its clean-up, exit 143; killed with SIGKILL, it takes its daemon with it', {
    timeout: 300_000,
  }, async () => {
    /** `pnpm demo`'s script run on its own (its pid the demo's), its output gathered. */
    const startDemo = (folder: string) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts'], {
        cwd: root,
        env: { ...process.env, ...platformEnv(folder) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const output = gatherOutput(child);
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child.once('exit', (code, signal) => resolve({ code, signal })),
      );
      const printed = async (text: string) => {
        await expect.poll(output, { timeout: 150_000, interval: 250 }).toContain(text);
      };
      return { child, exited, printed, output };
    };
    /** The demo's provider daemon (its child running tools/provider-daemon) and the folder of its configuration. */
    const daemonOf = (demo: number) => {
      for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
        try {
          const ppid = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ')[1];
          if (Number(ppid) !== demo) continue;
          if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('tools/provider-daemon/src/main.ts')) continue;
          const config = /(?:^|\0)DAEMON_CONFIG_FILE=([^\0]*)/.exec(readFileSync(`/proc/${pid}/environ`, 'utf8'))?.[1];
          if (config) return { pid: Number(pid), work: path.dirname(config) };
        } catch {
          // Gone meanwhile.
        }
      }
      return undefined;
    };
    /** Whether a process runs (a zombie, ended but not reaped yet, does not). */
    const runs = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
      } catch {
        return false;
      }
    };

    // SIGTERM (and Ctrl-C alike): the daemon stopped, the demo's folder (the daemon's secret in daemon.yaml) removed,
    // the machine taken off the market and its credentials revoked, then 143.
    const stopped = startDemo(dataDir);
    await stopped.printed('machine registered by the daemon');
    const daemon = daemonOf(stopped.child.pid ?? 0);
    expect(daemon, stopped.output()).toBeDefined();
    expect(existsSync(path.join(daemon!.work, 'daemon.yaml'))).toBe(true);
    stopped.child.kill('SIGTERM');
    expect(await stopped.exited).toEqual({ code: 143, signal: null });
    const said = stopped.output();
    expect(said).toContain('[demo] SIGTERM: stopping, and tidying up what it made');
    expect(said).toMatch(
      /^\[demo\] tidied up: the machines demo-rig \(\S+\) taken off the market, 1 daemon credentials revoked$/m,
    );
    expect(said).not.toMatch(/FAILED|DEMO OK/);
    expect(runs(daemon!.pid)).toBe(false);
    expect(existsSync(daemon!.work)).toBe(false);

    // SIGKILL: nothing of the demo runs any more; its daemon stops on its lifeline.
    const killed = startDemo(dataDir);
    await killed.printed('machine registered by the daemon');
    const orphan = daemonOf(killed.child.pid ?? 0);
    expect(orphan, killed.output()).toBeDefined();
    killed.child.kill('SIGKILL');
    await killed.exited;
    await expect.poll(() => runs(orphan!.pid), { timeout: 30_000, interval: 250 }).toBe(false);
    // What only a clean-up would have removed: the test's own temporary folder takes it.
    rmSync(orphan!.work, { recursive: true, force: true });
  });

  it('runs pnpm wallet on it, found by PLATFORM_PORT_BASE and PLATFORM_DATA_DIR: a wrong password is one line, a test wallet deposits', {
    timeout: 180_000,
  }, async () => {
    const email = `wallet-${Date.now()}@example.com`;
    const password = 'a long wallet passphrase';
    const registered = await fetch(`http://127.0.0.1:${ports.auth}/api/v1/auth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password }),
    });
    expect(registered.status).toBe(201);
    const wallet = (args: string[], pass: string) =>
      run('pnpm', ['-s', 'wallet', ...args, '--email', email, '--password', pass], {
        cwd: root,
        env: { ...process.env, ...platformEnv(dataDir) },
        timeout: 120_000,
      }).then(
        (r) => ({ code: 0, ...r }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
    const wrong = await wallet(['open', '--test-wallet', 'wallet-3'], 'not the passphrase');
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^pnpm wallet: [^\n]*answered 401 INVALID_CREDENTIALS[^\n]*\n$/);
    // The local chain's third test wallet (the demo's faucet is the first), its keypair from the data folder.
    const sent = await wallet(['deposit', '--test-wallet', 'wallet-3', '--amount', '5'], password);
    expect(sent.code, sent.stderr).toBe(0);
    const { transaction } = JSON.parse(sent.stdout) as { transaction: { amount: string; status: string } };
    expect(transaction).toMatchObject({ amount: '5.000000', status: 'confirmed' });
  });

  it('gives any number of users an address of their own with pnpm wallet new and fund, deposited through the gateway alone', {
    timeout: 240_000,
  }, async () => {
    // As against docker-compose: the gateway and the chain answer, auth and billing are not reachable at their own
    // ports (PLATFORM_PORT_BASE points where nothing listens), so every call must go through the one origin.
    const nowhere = String((process.env.TEST_PORT_BASE ? Number(process.env.TEST_PORT_BASE) : 28000) + 50);
    const env = {
      ...process.env,
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_PORT_BASE: nowhere,
      GATEWAY_URL: `http://127.0.0.1:${ports.gateway}`,
      SOLANA_RPC_URL: `http://127.0.0.1:${ports.solana}`,
    };
    const wallet = (args: string[]) =>
      run('pnpm', ['-s', 'wallet', ...args], { cwd: root, env, timeout: 120_000 }).then(
        (r) => ({ code: 0, ...r }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
    const keys = mkdtempSync(path.join(tmpdir(), 'wallet-keys-'));
    // More users than the local chain has test wallets (three), each with a new address.
    let last: { email: string; password: string; keypair: string } | undefined;
    for (let n = 1; n <= 4; n++) {
      const email = `wallet-new-${n}-${Date.now()}@example.com`;
      const password = 'a long wallet passphrase';
      const registered = await fetch(`http://127.0.0.1:${ports.gateway}/api/v1/auth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password }),
      });
      expect(registered.status).toBe(201);
      const keypair = path.join(keys, `user-${n}.json`);
      const made = await wallet(['new', '--keypair', keypair]);
      expect(made.code, made.stderr).toBe(0);
      const { address } = JSON.parse(made.stdout) as { address: string };
      expect(statSync(keypair).mode & 0o777).toBe(0o600);
      const funded = await wallet(['fund', '--keypair', keypair, '--amount', '25']);
      expect(funded.code, funded.stderr).toBe(0);
      expect(JSON.parse(funded.stdout)).toMatchObject({ address, tokens: '25.000000' });
      const sent = await wallet([
        'deposit',
        '--keypair',
        keypair,
        '--amount',
        '20',
        '--email',
        email,
        '--password',
        password,
      ]);
      expect(sent.code, sent.stderr).toBe(0);
      expect(JSON.parse(sent.stdout)).toMatchObject({ transaction: { amount: '20.000000', status: 'confirmed' } });
      last = { email, password, keypair };
    }

    // gpu wallet deposit --keypair whose transfer lands but whose claim billing refuses (here the test's proxy in
    // front of the gateway): with --json one object on standard error with what claims it later, and that claims it.
    const proxy = await faultProxy(`http://127.0.0.1:${ports.gateway}`);
    try {
      const claim = (r: Seen) => r.method === 'POST' && /^\/api\/v1\/wallet\/[^/]+\/deposit$/.test(r.url);
      const refused = proxy.refuse(claim, 503, 'SERVICE_UNAVAILABLE');
      const gpu = gpuCli(path.join(keys, 'gpu'));
      const viaProxy = { GPU_URL: proxy.url, SOLANA_RPC_URL: env.SOLANA_RPC_URL };
      expect((await gpu(['login', '--email', last!.email], { ...viaProxy, GPU_PASSWORD: last!.password })).code).toBe(
        0,
      );
      const said = await gpu(['wallet', 'deposit', '--keypair', last!.keypair, '--amount', '1'], viaProxy);
      expect(said).toMatchObject({ code: 1, stdout: '' });
      expect(said.stderr).toMatch(
        /^gpu: SERVICE_UNAVAILABLE: sent 1\.000000 tokens to the treasury \(signature \w+\) but billing did not credit them: .*\(the tokens are not lost: claim them with gpu wallet deposit [\w-]+ --signature \w+ --amount 1\.000000 --url http:\S+\)\n$/,
      );
      const sent = await gpu(['wallet', 'deposit', '--keypair', last!.keypair, '--amount', '3', '--json'], viaProxy);
      expect(sent).toMatchObject({ code: 1, stdout: '' });
      const problem = JSON.parse(sent.stderr) as Record<string, string>;
      expect(problem).toMatchObject({ status: 503, code: 'SERVICE_UNAVAILABLE', amount: '3.000000' });
      expect(problem.detail).toContain(
        `sent 3.000000 tokens to the treasury (signature ${problem.signature}) but billing did not credit them`,
      );
      expect(problem.hint).toContain(
        `gpu wallet deposit ${problem.wallet_id} --signature ${problem.signature} --amount 3.000000`,
      );
      refused.end();
      const claimed = await gpu(
        ['wallet', 'deposit', problem.wallet_id!, '--signature', problem.signature!, '--amount', '3.000000', '--json'],
        viaProxy,
      );
      expect(claimed.code, claimed.stderr).toBe(0);
      expect(JSON.parse(claimed.stdout)).toMatchObject({ amount: '3.000000', status: 'confirmed' });
      // The wallet: the two credited deposits; its address on chain: what it was funded with less the three sent
      // (the first of 1 sent but never claimed).
      const balance = await gpu(['wallet', 'balance', problem.wallet_id!, '--chain', '--json'], viaProxy);
      expect(balance.code, balance.stderr).toBe(0);
      expect(JSON.parse(balance.stdout)).toMatchObject({
        total: '23.000000',
        chain: { wallet_id: problem.wallet_id, token_balance: '1.000000', decimals: 6 },
      });
    } finally {
      await proxy.close();
    }
  });

  it('restarts a service killed with SIGKILL, with its data, while the others stay up', {
    timeout: 150_000,
  }, async () => {
    const victim = services.includes('provider-registry') ? 'provider-registry' : services[0]!;
    const others = services.filter((s) => s !== victim);
    // The supervisor logs every start with the child's pid.
    const pidsOf = (name: string) => startedPids(platform.output(), name);
    const [pid] = pidsOf(victim);
    expect(pid, platform.output().slice(-4000)).toBeGreaterThan(0);
    const othersBefore = others.map(pidsOf);

    // Something written before the crash (a provider in the registry's embedded database) is there after it.
    const token = await platform.adminToken();
    const registryUrl = `http://127.0.0.1:${ports['provider-registry']}`;
    let providerId: string | undefined;
    if (victim === 'provider-registry') {
      const created = await fetch(`${registryUrl}/providers`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({
          owner_id: 'owner-1',
          name: 'rig-before-the-crash',
          gpus: [{ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, driver_version: '550.54.15' }],
        }),
      });
      expect(created.status, await created.clone().text()).toBe(201);
      providerId = ((await created.json()) as { id: string }).id;
    }

    process.kill(pid as number, 'SIGKILL');
    const notLive: string[] = [];
    const deadline = Date.now() + 140_000;
    let back = false;
    while (!back && Date.now() < deadline && child.exitCode === null) {
      await new Promise((r) => setTimeout(r, 500));
      // Alive at every look (its full check asks its dependencies, which a busy machine may make slow now and then).
      for (const name of others) if (!(await live(ports[name]))) notLive.push(name);
      const h = await health(ports[victim]);
      back = h?.status === 200 && h.body.status === 'UP' && pidsOf(victim).length === 2;
    }
    expect(back, `not back:\n${platform.output().slice(-4000)}`).toBe(true);
    expect(child.exitCode).toBeNull();
    expect(platform.output()).toMatch(new RegExp(`\\[start\\] ${victim} \\(pid ${pid}\\) exited \\(signal SIGKILL\\)`));
    // The others answered at every look, were never restarted, and are healthy.
    expect(notLive).toEqual([]);
    for (const name of others) {
      await expect.poll(async () => (await health(ports[name]))?.status, { message: name, timeout: 30_000 }).toBe(200);
    }
    expect(others.map(pidsOf)).toEqual(othersBefore);
    if (providerId) {
      const read = await fetch(`${registryUrl}/providers/${providerId}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(read.status).toBe(200);
      expect(((await read.json()) as { name: string }).name).toBe('rig-before-the-crash');
    }
  });

  // Last before the platform stops: it spends 127.0.0.1's sign-ups for the hour and its failed logins for the minute.
  it('counts every caller by its own address: a forged X-Forwarded-For is believed neither by a service nor through the gateway', {
    timeout: 90_000,
  }, async () => {
    expect(await platform.untilHealthy()).toEqual([]);
    expect(await platform.untilPrinted('[start] up')).toContain('[start] up');
    const attempt = async (port: number, route: string, body: object, i: number) =>
      (
        await fetch(`http://127.0.0.1:${port}/api/v1/auth/${route}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-forwarded-for': `203.0.113.${i}` },
          body: JSON.stringify(body),
        })
      ).status;
    const unique = (i: number) => `forged-${i}-${Date.now()}@example.com`;
    // Through the gateway: failed logins, each naming a new address (auth allows 20 a minute per address, in fixed
    // windows). At once, and 41 of them: one after another they can take longer than the window on a loaded machine,
    // and a window's end falling between them still leaves 21 in one window.
    const logins = await Promise.all(
      Array.from({ length: 41 }, (_, i) =>
        attempt(ports.gateway, 'login', { email: unique(i + 1), password: 'not the password' }, i + 1),
      ),
    );
    expect(logins).toContain(429);
    // Straight to auth: failed logins again, each naming an address of its own. Believed, each would be its address's
    // first; counted by the connection's (this machine's, whose window the ones above filled), they are refused.
    const straight = await Promise.all(
      Array.from({ length: 41 }, (_, i) =>
        attempt(ports.auth, 'login', { email: unique(i + 100), password: 'not the password' }, i + 100),
      ),
    );
    expect(straight).toContain(429);
  });

  it('stops everything on Ctrl-C (SIGINT to the whole process group, as a terminal sends it)', {
    timeout: 60_000,
  }, async () => {
    process.kill(-(child.pid as number), 'SIGINT');
    expect(await exited).toBe(0);
    // Its own line is the last: what its processes print as they end goes to their log files.
    expect(platform.output().trimEnd().split('\n').at(-1)).toBe('[start] stopped: every process it ran has ended');
    for (const name of services) expect(await health(ports[name]), name).toBeUndefined();
    // Every process it started, the restarted service too, is gone: none left orphaned, and the lock is given back.
    const pids = startedPids(platform.output());
    expect(existsSync(path.join(dataDir, 'platform.lock'))).toBe(false);
    expect(pids.length).toBeGreaterThan(services.length);
    expect(pids.filter(isAlive)).toEqual([]);
  });

  it('stops what it started when a service exits during start-up (a configuration error)', {
    timeout: 150_000,
  }, async () => {
    const victim = services.includes('provider-registry') ? 'provider-registry' : services[0]!;
    const prefix = { auth: 'AUTH', storage: 'STORAGE', 'provider-registry': 'REGISTRY', billing: 'BILLING' }[victim];
    const again = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
      cwd: root,
      env: {
        ...process.env,
        ...platformEnv(dataDir),
        LOG_LEVEL: 'warn',
        // An unknown key stops that service's start-up.
        [`${prefix}__NO_SUCH_SETTING`]: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = gatherOutput(again);
    const code = await new Promise<number | null>((r) => again.on('exit', (c) => r(c)));
    expect(code, output().slice(-4000)).toBe(1);
    expect(output()).toContain(`[start] start-up failed: ${victim} exited during start-up`);
    expect(output()).not.toContain('[start] up');
    for (const name of services) expect(await health(ports[name]), name).toBeUndefined();
    // Every process it started (the pids it logged) is gone.
    const pids = startedPids(output());
    expect(pids.length).toBeGreaterThan(services.length);
    expect(pids.filter(isAlive)).toEqual([]);
  });
});
