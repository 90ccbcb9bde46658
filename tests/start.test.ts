/**
 * The README's start line: `pnpm start` brings every service up healthy on
 * embedded defaults (local S3 store, local Solana chain, PGlite databases),
 * a service that crashes is started again while the others keep running, Ctrl-C (SIGINT) stops everything
 * cleanly, and a start-up that fails stops what it had started.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
// With TEST_PORT_BASE (the test servers at base+0..9), the platform goes at base+10 and up (PLATFORM_PORT_BASE), so
// two test runs can share a machine; otherwise it takes the contract ports, as `pnpm start` does.
const portBase = process.env.TEST_PORT_BASE ? Number(process.env.TEST_PORT_BASE) + 10 : undefined;
const contractPorts: Record<string, number> = { auth: 8000, storage: 8001, 'provider-registry': 8002, billing: 8003 };
const ports = Object.fromEntries(
  Object.entries(contractPorts).map(([name, port]) => [name, portBase === undefined ? port : portBase + port - 8000]),
);
const services = readdirSync(path.join(root, 'services')).filter((d) =>
  existsSync(path.join(root, 'services', d, 'src/server.ts')),
);
const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-start-'));
const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
  cwd: root,
  env: {
    ...process.env,
    PLATFORM_DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    ...(portBase === undefined ? {} : { PLATFORM_PORT_BASE: String(portBase) }),
  },
  stdio: ['ignore', 'pipe', 'pipe'],
  // A process group of its own, as a shell gives a foreground job: Ctrl-C signals the whole group.
  detached: true,
});
let output = '';
child.stdout.on('data', (d) => {
  output += d;
});
child.stderr.on('data', (d) => {
  output += d;
});
/** Whether a process of this pid still exists. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));

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

async function health(port: number): Promise<{ status: number; body: { status?: string } } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`);
    return { status: res.status, body: (await res.json()) as { status?: string } };
  } catch {
    return undefined;
  }
}

describe('pnpm start', () => {
  it('brings every service up healthy on embedded defaults', { timeout: 180_000 }, async () => {
    expect(services.length).toBeGreaterThan(0);
    const deadline = Date.now() + 170_000;
    const pending = new Set(services);
    while (pending.size > 0 && Date.now() < deadline && child.exitCode === null) {
      for (const name of [...pending]) {
        const h = await health(ports[name] ?? 0);
        if (h?.status === 200 && h.body.status === 'UP') pending.delete(name);
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    expect([...pending], `not healthy:\n${output.slice(-4000)}`).toEqual([]);
    expect(existsSync(path.join(dataDir, 'storage', 'config.yaml'))).toBe(true);
  });

  it('is secure by default: no token 401, the platform client and the initial admin get in', {
    timeout: 60_000,
  }, async () => {
    const url = (name: string, p: string) => `http://127.0.0.1:${ports[name]}${p}`;
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
    const admin = JSON.parse(readFileSync(path.join(dataDir, 'auth', 'admin.json'), 'utf8'));
    const login = await fetch(url('auth', '/api/v1/auth/login'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(admin),
    });
    expect(login.status).toBe(200);
    const { access_token: adminToken } = (await login.json()) as { access_token: string };
    const providers = await fetch(url('provider-registry', '/providers'), {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(providers.status).toBe(200);
  });

  it('has an embedded store that checks signatures as S3 does, and downloads by redirect, tried with plain curl', {
    timeout: 60_000,
  }, async () => {
    const url = (name: string, p: string) => `http://127.0.0.1:${ports[name]}${p}`;
    const store = `http://127.0.0.1:${portBase === undefined ? 9000 : portBase + 4}`;
    const admin = JSON.parse(readFileSync(path.join(dataDir, 'auth', 'admin.json'), 'utf8'));
    const login = await fetch(url('auth', '/api/v1/auth/login'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(admin),
    });
    const auth = `Authorization: Bearer ${((await login.json()) as { access_token: string }).access_token}`;
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

  it('runs pnpm demo on it: sign-up to on-chain payout, with the reference daemon and the typed client', {
    timeout: 240_000,
  }, async () => {
    const demo = await run('pnpm', ['-s', 'demo'], {
      cwd: root,
      env: {
        ...process.env,
        PLATFORM_DATA_DIR: dataDir,
        ...(portBase === undefined ? {} : { PLATFORM_PORT_BASE: String(portBase) }),
      },
      timeout: 230_000,
    }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`pnpm demo failed: ${err.message}\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
    });
    // The running platform is used, not a second one started.
    expect(demo.stdout).toMatch(/platform: using the one running/);
    const summary = JSON.parse(/^DEMO OK (.*)$/m.exec(demo.stdout)?.[1] ?? 'null') as Record<string, string | number>;
    expect(summary, demo.stdout).not.toBeNull();
    // One minute of 4 H100s at the provider's 200/GPU-hour plus VRAM and power, 5% fee, the rest paid out on chain.
    expect(summary.billed_minutes).toBe(1);
    expect(summary.total_cost).toBe('13.486197');
    expect(summary.provider_earnings).toBe('12.811887');
    expect(summary.payout_amount).toBe('12.811887');
    expect(summary.payout_address_balance).toBe('12.811887');
    expect(summary.payout_signature).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/);
    // 900 deposited, the minute paid, the rest of the hold released.
    expect(summary.renter_available).toBe('886.513803');
    // The demo's own reconciliation (read back from billing and the chain) held, every line of it.
    expect(summary.reconciled).toBe(7);
    expect(demo.stdout).not.toMatch(/FAIL/);
    expect(demo.stdout).toMatch(/renter discovered the machine/);
    expect(demo.stdout).toMatch(/renter uploaded a dataset/);
  });

  it('restarts a service killed with SIGKILL, with its data, while the others stay up', {
    timeout: 150_000,
  }, async () => {
    const victim = services.includes('provider-registry') ? 'provider-registry' : (services[0] as string);
    const others = services.filter((s) => s !== victim);
    // The supervisor logs every start with the child's pid.
    const pidsOf = (name: string) =>
      [...output.matchAll(new RegExp(`\\[start\\] ${name} started \\(pid (\\d+)\\)`, 'g'))].map((m) => Number(m[1]));
    const [pid] = pidsOf(victim);
    expect(pid, output.slice(-4000)).toBeGreaterThan(0);
    const othersBefore = others.map(pidsOf);

    // Something written before the crash (a provider in the registry's embedded database) is there after it.
    const admin = JSON.parse(readFileSync(path.join(dataDir, 'auth', 'admin.json'), 'utf8'));
    const login = await fetch(`http://127.0.0.1:${ports.auth}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(admin),
    });
    const { access_token: token } = (await login.json()) as { access_token: string };
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
    const notHealthy: string[] = [];
    const deadline = Date.now() + 140_000;
    let back = false;
    while (!back && Date.now() < deadline && child.exitCode === null) {
      await new Promise((r) => setTimeout(r, 500));
      for (const name of others) if ((await health(ports[name] ?? 0))?.status !== 200) notHealthy.push(name);
      const h = await health(ports[victim] ?? 0);
      back = h?.status === 200 && h.body.status === 'UP' && pidsOf(victim).length === 2;
    }
    expect(back, `not back:\n${output.slice(-4000)}`).toBe(true);
    expect(child.exitCode).toBeNull();
    expect(output).toMatch(new RegExp(`\\[start\\] ${victim} \\(pid ${pid}\\) exited \\(signal SIGKILL\\)`));
    // The others answered at every look and were never restarted.
    expect(notHealthy).toEqual([]);
    expect(others.map(pidsOf)).toEqual(othersBefore);
    if (providerId) {
      const read = await fetch(`${registryUrl}/providers/${providerId}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(read.status).toBe(200);
      expect(((await read.json()) as { name: string }).name).toBe('rig-before-the-crash');
    }
  });

  it('stops everything on Ctrl-C (SIGINT to the whole process group, as a terminal sends it)', {
    timeout: 60_000,
  }, async () => {
    process.kill(-(child.pid as number), 'SIGINT');
    expect(await exited).toBe(0);
    for (const name of services) expect(await health(ports[name] ?? 0), name).toBeUndefined();
    // Every process it started, the restarted service too, is gone: none left orphaned.
    const pids = [...output.matchAll(/\[start\] \S+ started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(pids.length).toBeGreaterThan(services.length);
    expect(pids.filter(isAlive)).toEqual([]);
  });

  it('stops what it started when a service exits during start-up (a configuration error)', {
    timeout: 150_000,
  }, async () => {
    const victim = services.includes('provider-registry') ? 'provider-registry' : (services[0] as string);
    const prefix = { auth: 'AUTH', storage: 'STORAGE', 'provider-registry': 'REGISTRY', billing: 'BILLING' }[victim];
    const again = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
      cwd: root,
      env: {
        ...process.env,
        PLATFORM_DATA_DIR: dataDir,
        LOG_LEVEL: 'warn',
        // An unknown key stops that service's start-up.
        [`${prefix}__NO_SUCH_SETTING`]: '1',
        ...(portBase === undefined ? {} : { PLATFORM_PORT_BASE: String(portBase) }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    again.stdout.on('data', (d) => {
      out += d;
    });
    again.stderr.on('data', (d) => {
      out += d;
    });
    const code = await new Promise<number | null>((r) => again.on('exit', (c) => r(c)));
    expect(code, out.slice(-4000)).toBe(1);
    expect(out).toContain(`[start] start-up failed: ${victim} exited during start-up`);
    for (const name of services) expect(await health(ports[name] ?? 0), name).toBeUndefined();
    // Every process it started (the pids it logged) is gone.
    const pids = [...out.matchAll(/\[start\] \S+ started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(pids.length).toBeGreaterThan(services.length);
    expect(pids.filter(isAlive)).toEqual([]);
  });
});
