import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type Caller,
  freePort,
  type ServerProcess,
  spawnServer,
  startTestIssuer,
  type TestIssuer,
  waitForHttp,
} from '../src/testing/index.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

interface Service extends ServerProcess {
  base: string;
}

const started: ChildProcess[] = [];
let issuer: TestIssuer;
let caller: Caller;

beforeAll(async () => {
  issuer = await startTestIssuer();
  caller = await issuer.user(['renter']);
});
afterAll(() => issuer.close());

/** Starts test/fixtures/service.ts with `env` and waits until it answers /health. */
async function startService(env: Record<string, string>): Promise<Service> {
  const port = await freePort();
  const proc = spawnServer('test/fixtures/service.ts', {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      AUTH_JWKS_URL: issuer.jwksUrl,
      ...env,
    },
  });
  started.push(proc.child);
  const base = `http://127.0.0.1:${port}`;
  await waitForHttp(`${base}/health`, proc, { ok: true });
  return { ...proc, base };
}

/** Resolves once the service has logged that the slow request is being handled. */
async function inFlight(service: Service): Promise<void> {
  while (!service.output().includes('slow request started')) await new Promise((r) => setTimeout(r, 20));
}

afterEach(() => {
  for (const child of started.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

describe('graceful shutdown (shutdown_timeout)', () => {
  it('lets an in-flight request finish, then exits 0 without waiting for the bound', async () => {
    const service = await startService({ FIXTURE__SHUTDOWN_TIMEOUT: '10s' });
    const response = fetch(`${service.base}/slow?ms=800`, { headers: caller.headers }).then(async (r) => ({
      status: r.status,
      body: await r.json(),
    }));
    await inFlight(service);
    const signalled = Date.now();
    service.child.kill('SIGTERM');
    const [res, exit] = await Promise.all([response, service.exited]);
    expect(res).toMatchObject({ status: 200, body: { slept_ms: 800 } });
    expect(exit.code).toBe(0);
    // Short of the 10 s bound: it did not wait for it (a busy machine may stretch the rest).
    expect(exit.at - signalled).toBeLessThan(9_000);
    expect(service.output()).toContain('shutdown complete');
  });

  it('exits 1 once the bound has passed when a request is still in flight', async () => {
    const service = await startService({ FIXTURE__SHUTDOWN_TIMEOUT: '1s' });
    const response = fetch(`${service.base}/slow?ms=20000`, { headers: caller.headers }).then(
      (r) => r.status,
      () => 'connection closed',
    );
    await inFlight(service);
    const signalled = Date.now();
    service.child.kill('SIGTERM');
    const exit = await service.exited;
    expect(exit.code).toBe(1);
    expect(exit.at - signalled).toBeGreaterThanOrEqual(900);
    // Long before the request's 20 s.
    expect(exit.at - signalled).toBeLessThan(10_000);
    expect(await response).toBe('connection closed');
    expect(service.output()).toContain('graceful shutdown timed out');
  });
  it('exits on SIGTERM within the bound when nothing reads its output any more (its supervisor was killed)', async () => {
    const service = await startService({ FIXTURE__SHUTDOWN_TIMEOUT: '10s' });
    // The reading ends of its stdout and stderr close, as when the process that started it dies: every line it
    // logs from now on meets a broken pipe (EPIPE), its last ones at exit too.
    service.child.stdout?.destroy();
    service.child.stderr?.destroy();
    const signalled = Date.now();
    service.child.kill('SIGTERM');
    const exit = await Promise.race([
      service.exited,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 12_000)),
    ]);
    expect(exit, 'still running 12 s after SIGTERM').toBeDefined();
    expect(exit?.code).toBe(0);
    expect((exit?.at ?? 0) - signalled).toBeLessThan(9_000);
  });
});

describe('LOG_PRETTY', () => {
  const jsonLines = (text: string) => text.split('\n').filter((l) => l.trim());

  it('writes one JSON object a line unless asked', async () => {
    const service = await startService({});
    service.child.kill('SIGTERM');
    await service.exited;
    const lines = jsonLines(service.output());
    expect(lines.length).toBeGreaterThan(0);
    const parsed = lines.map((l) => JSON.parse(l));
    expect(parsed.find((l) => l.msg === 'fixture-service listening')).toMatchObject({
      level: 'info',
      service: 'fixture-service',
    });
  });

  it('writes human-readable lines when LOG_PRETTY=true', async () => {
    const service = await startService({ LOG_PRETTY: 'true' });
    service.child.kill('SIGTERM');
    await service.exited;
    const listening = jsonLines(service.output()).find((l) => l.includes('fixture-service listening'));
    expect(listening).toBeDefined();
    expect(() => JSON.parse(listening as string)).toThrow();
    expect(listening).toMatch(/INFO/);
  });
});
