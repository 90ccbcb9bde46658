import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConsulRecorder, testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const port = Number(process.env.TEST_PORT_BASE ?? 55400) + 8;
const base = `http://127.0.0.1:${port}`;
const consul = new ConsulRecorder();
const dataDir = mkdtempSync(join(tmpdir(), 'registry-pglite-'));
let child: ChildProcess;
let output = '';

beforeAll(async () => {
  const consulAddress = await consul.start();
  child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      PORT: String(port),
      HOST: '0.0.0.0',
      CONSUL_ENABLED: 'true',
      CONSUL_ADDRESS: consulAddress,
      SERVICE_TAGS: 'gpu,registry',
      NATS_URL: testEnv.natsUrl,
      REGISTRY__EVENTS__STREAM: `TEST_SERVER_${port}`,
      REGISTRY__DATABASE__EMBEDDED_PATH: dataDir,
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d) => {
    output += d;
  });
  child.stderr?.on('data', (d) => {
    output += d;
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await fetch(`${base}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`server did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});

afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGKILL');
  await consul.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('server process (embedded PGlite, Consul, NATS)', () => {
  it('serves the API on an embedded database and registers in Consul with an HTTP check on 127.0.0.1', async () => {
    const res = await fetch(`${base}/providers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        owner_id: 'o',
        name: 'pglite-rig',
        gpus: [{ model_name: 'RTX 4090', vram: 24564, driver_version: '550' }],
      }),
    });
    expect(res.status).toBe(201);
    const listed = (await (await fetch(`${base}/providers?gpu_model=4090&min_gpus=1`)).json()) as { name: string }[];
    expect(listed.map((p) => p.name)).toEqual(['pglite-rig']);
    const [service] = [...consul.services.values()];
    expect(service).toMatchObject({
      Name: 'provider-registry',
      Address: '127.0.0.1',
      Port: port,
      Tags: ['gpu', 'registry'],
    });
    expect(JSON.stringify(service)).toContain(`http://127.0.0.1:${port}/health`);
  });

  it('deregisters and exits 0 on SIGTERM', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(consul.calls.some((c) => c.path.startsWith('/v1/agent/service/deregister/'))).toBe(true);
    expect(consul.services.size).toBe(0);
    expect(output).toContain('shutdown complete');
  });
});
