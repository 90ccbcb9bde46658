/**
 * `pnpm start` as the tests run it: the script in a process group of its own (as a shell runs a foreground job, so
 * a Ctrl-C can be sent to the whole group), on a temporary data folder, at a test file's place among the ports (the
 * test servers are at TEST_PORT_BASE+0..9), with its output gathered. It holds a lifeline from the test's process
 * (`lifelineEnv` of @gpu/common/lifeline, as scripts/lib/supervisor.ts hands its children theirs): a test runner
 * killed, even with SIGKILL, takes the platform with it rather than leaving it running with every port held.
 *
 *   const platform = startPlatform(platformPlace(1), { ALGORITHM: 'HS256', SECRET_KEY: secret });
 *   expect(await platform.untilHealthy()).toEqual([]);
 *   const token = await platform.adminToken();
 *   await platform.stop();
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHmac, generateKeyPairSync, randomBytes, randomUUID, sign } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { LIFELINE_FD, lifelineEnv } from '@gpu/common/lifeline';
import { gatherOutput } from '@gpu/common/testing';
import { STOP_TIMEOUT_MS } from '../../scripts/lib/supervisor.ts';

export const root = fileURLToPath(new URL('../..', import.meta.url));
/** Each port's contract number and its place after PLATFORM_PORT_BASE (scripts/lib/platform.ts). */
const contractPorts = {
  auth: [8000, 0],
  storage: [8001, 1],
  'provider-registry': [8002, 2],
  billing: [8003, 3],
  s3: [9000, 4],
  solana: [8899, 5],
  'solana-ws': [8900, 6],
  mail: [1025, 7],
  nats: [4222, 8],
  gateway: [8080, 10],
} as const;
export type PortName = keyof typeof contractPorts;

/**
 * Where a test file's platforms go, so that the files that start one can run side by side (each takes 11 ports, the
 * gateway's at +10): place 0 (tests/start.test.ts) at TEST_PORT_BASE+10 and up, or on the contract ports without
 * TEST_PORT_BASE, as `pnpm start` runs; place 1 at +30, place 2 at +60 (+50 stays free: wallet-cli.test.ts's
 * "nowhere"), or at 28200 and 28300 without TEST_PORT_BASE.
 */
export function platformPlace(place: 0 | 1 | 2) {
  const testBase = process.env.TEST_PORT_BASE ? Number(process.env.TEST_PORT_BASE) : undefined;
  /** The platform's PLATFORM_PORT_BASE, or none (the contract ports). */
  const portBase = testBase === undefined ? [undefined, 28200, 28300][place] : testBase + [10, 30, 60][place]!;
  /** Every port of the platform by name: the services, the S3 store, the chain's RPC and WebSocket. */
  const ports = Object.fromEntries(
    Object.entries(contractPorts).map(([name, [port, offset]]) => [
      name,
      portBase === undefined ? port : portBase + offset,
    ]),
  ) as Record<PortName, number>;
  /** The environment that points a command (`pnpm start`, `pnpm demo`, `pnpm wallet`) at this platform. */
  const env = (dataDir: string): Record<string, string> => ({
    PLATFORM_DATA_DIR: dataDir,
    ...(portBase === undefined ? {} : { PLATFORM_PORT_BASE: String(portBase) }),
  });
  return { portBase, ports, env };
}
export type PlatformPlace = ReturnType<typeof platformPlace>;

/** The services this checkout has (a folder with src/server.ts). */
export const services = readdirSync(path.join(root, 'services')).filter((d) =>
  existsSync(path.join(root, 'services', d, 'src/server.ts')),
) as ('auth' | 'storage' | 'provider-registry' | 'billing')[];

/**
 * `pnpm start` (the script) with `env` added to this process's environment, run to its end: for a start that is to be
 * refused. Its exit code and its output, stdout and stderr together.
 */
export async function runStart(env: Record<string, string>): Promise<{ code: number; output: string }> {
  return promisify(execFile)(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    timeout: 60_000,
  }).then(
    (r) => ({ code: 0, output: `${r.stdout}${r.stderr}` }),
    (err: { code: number; stdout: string; stderr: string }) => ({
      code: err.code,
      output: `${err.stdout}${err.stderr}`,
    }),
  );
}

/** Whether a process of this pid still exists. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A service's /health: its status and body, or undefined when nothing answers. */
export async function health(port: number): Promise<{ status: number; body: { status?: string } } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`);
    return { status: res.status, body: (await res.json()) as { status?: string } };
  } catch {
    return undefined;
  }
}

/** Whether a service answers its liveness probe (`/health/live`: the process answers, no dependency asked). */
export async function live(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/health/live`)).status === 200;
  } catch {
    return false;
  }
}

/** The pids a `pnpm start` output says it started (`[start] <name> started (pid N)`), of one process or all. */
export function startedPids(output: string, name = '\\S+'): number[] {
  return [...output.matchAll(new RegExp(`\\[start\\] ${name} started \\(pid (\\d+)\\)`, 'g'))].map((m) => Number(m[1]));
}

export interface StartedPlatform {
  child: ChildProcess;
  dataDir: string;
  ports: Record<PortName, number>;
  /** Everything it printed so far, stdout and stderr together. */
  output(): string;
  /** Its exit code (null for a signal). */
  exited: Promise<number | null>;
  /** Waits until every service answers /health 200 UP, or the time is up or it exited; returns those still not up. */
  untilHealthy(timeoutMs?: number): Promise<string[]>;
  /**
   * Waits until its output contains `text` (or the time is up or it exited); returns the output. `pnpm start` prints
   * `[start] up` after its own health checks, which may finish after a test's.
   */
  untilPrinted(text: string, timeoutMs?: number): Promise<string>;
  /** The initial admin's access token (the password pnpm start made in the data folder). */
  adminToken(): Promise<string>;
  /** Stops it as Ctrl-C at a terminal would (SIGINT to its process group); SIGKILL past 20 s. */
  stop(): Promise<void>;
}

/**
 * Starts `pnpm start` (the script itself, as `pnpm start` runs it) at `place`, on `dataDir` (a new folder by
 * default), with `env` added to this process's environment.
 */
export function startPlatform(
  place: PlatformPlace,
  env: Record<string, string> = {},
  dataDir = mkdtempSync(path.join(tmpdir(), 'platform-start-')),
): StartedPlatform {
  const { ports } = place;
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: root,
    // Its lifeline: time for its own graceful stop (its children's STOP_TIMEOUT_MS) before it is killed.
    env: { ...process.env, LOG_LEVEL: 'warn', ...place.env(dataDir), ...lifelineEnv(2 * STOP_TIMEOUT_MS), ...env },
    // Descriptor 3 (LIFELINE_FD) is the lifeline: held here, never written, closed by the kernel with this process.
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    // A process group of its own, as a shell gives a foreground job: Ctrl-C signals the whole group.
    detached: true,
  });
  child.stdio[LIFELINE_FD]?.on('error', () => {});
  const output = gatherOutput(child);
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return {
    child,
    dataDir,
    ports,
    output,
    exited,
    async untilHealthy(timeoutMs = 170_000) {
      const deadline = Date.now() + timeoutMs;
      const pending = new Set<string>(services);
      while (pending.size > 0 && Date.now() < deadline && child.exitCode === null) {
        for (const name of [...pending]) {
          const h = await health(ports[name as PortName]);
          if (h?.status === 200 && h.body.status === 'UP') pending.delete(name);
        }
        if (pending.size > 0) await new Promise((r) => setTimeout(r, 500));
      }
      return [...pending];
    },
    async untilPrinted(text: string, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!output().includes(text) && Date.now() < deadline && child.exitCode === null)
        await new Promise((r) => setTimeout(r, 100));
      return output();
    },
    async adminToken() {
      const admin = JSON.parse(readFileSync(path.join(dataDir, 'auth', 'admin.json'), 'utf8'));
      const login = await fetch(`http://127.0.0.1:${ports.auth}/api/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(admin),
      });
      if (login.status !== 200) throw new Error(`admin login: ${login.status} ${await login.text()}`);
      return ((await login.json()) as { access_token: string }).access_token;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(-(child.pid as number), 'SIGINT');
        } catch {
          // Already gone.
        }
      }
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** `token`'s header and claims signed again with a key of the same algorithm that the platform never saw. */
export function forgedToken(token: string): string {
  const [header, payload] = token.split('.') as [string, string];
  const { alg } = JSON.parse(Buffer.from(header, 'base64url').toString('utf8')) as { alg: string };
  const signed = Buffer.from(`${header}.${payload}`);
  let signature: Buffer;
  if (alg === 'HS256') signature = createHmac('sha256', randomBytes(48).toString('base64')).update(signed).digest();
  else if (alg === 'EdDSA') signature = sign(null, signed, generateKeyPairSync('ed25519').privateKey);
  else throw new Error(`no forger for ${alg}`);
  return `${header}.${payload}.${signature.toString('base64url')}`;
}

/**
 * An authenticated call to each of the four services with `token`, as a user's program would make them: who am I
 * (auth), a listing of the default bucket (storage), a machine registered (provider registry: needs an admin's or a
 * provider's token; the caller's own), and a quote for that machine (billing, which reads the machine's record from the registry with
 * the platform's own machine client: its VRAM comes back in the quote). The status of each, and the quote.
 */
export async function callEveryService(ports: Record<PortName, number>, token: string) {
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const url = (name: PortName, p: string) => `http://127.0.0.1:${ports[name]}${p}`;
  const me = await fetch(url('auth', '/api/v1/auth/me'), { headers });
  const ownerId = me.status === 200 ? ((await me.json()) as { id: string }).id : randomUUID();
  const listing = await fetch(url('storage', '/objects/list'), { headers });
  const registered = await fetch(url('provider-registry', '/providers'), {
    method: 'POST',
    headers,
    body: JSON.stringify({
      owner_id: ownerId,
      name: `rig-${randomBytes(4).toString('hex')}`,
      gpus: [{ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, driver_version: '550.54.15' }],
    }),
  });
  const providerId = registered.status === 201 ? ((await registered.json()) as { id: string }).id : randomUUID();
  const quote = await fetch(url('billing', '/api/v1/pricing/calculate'), {
    method: 'POST',
    headers,
    body: JSON.stringify({ gpu_model: 'A100', provider_id: providerId, duration_hours: '1' }),
  });
  return {
    statuses: { auth: me.status, storage: listing.status, registry: registered.status, billing: quote.status },
    quote: (await quote.json()) as { provider_id?: string; requested_vram_mb?: number; code?: string },
    providerId,
  };
}
