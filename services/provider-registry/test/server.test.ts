import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type Caller,
  ConsulRecorder,
  freePort,
  type ServerProcess,
  spawnServer,
  startTestIssuer,
  type TestIssuer,
  testEnv,
  waitForHttp,
} from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
let port: number;
let base: string;
const consul = new ConsulRecorder();
const dataDir = mkdtempSync(join(tmpdir(), 'registry-pglite-'));
let proc: ServerProcess;
let issuer: TestIssuer;
let owner: Caller;

beforeAll(async () => {
  port = await freePort();
  base = `http://127.0.0.1:${port}`;
  issuer = await startTestIssuer();
  owner = await issuer.user(['provider']);
  const consulAddress = await consul.start();
  proc = spawnServer('src/server.ts', {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      PORT: String(port),
      HOST: '0.0.0.0',
      CONSUL_ENABLED: 'true',
      CONSUL_ADDRESS: consulAddress,
      SERVICE_TAGS: 'gpu,registry',
      NATS_URL: testEnv.natsUrl,
      NATS_CREDENTIALS: testEnv.natsCredentials,
      REGISTRY__EVENTS__STREAM: `TEST_SERVER_${port}`,
      REGISTRY__DATABASE__EMBEDDED_PATH: dataDir,
      LOG_LEVEL: 'info',
      AUTH_JWKS_URL: issuer.jwksUrl,
    },
  });
  await waitForHttp(`${base}/health`, proc, { ok: true, timeoutMs: 60_000 });
});

afterAll(async () => {
  if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await consul.close();
  await issuer.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('server process (embedded PGlite, Consul, NATS)', () => {
  it('serves the API on an embedded database and registers in Consul with an HTTP check on 127.0.0.1', async () => {
    const res = await fetch(`${base}/providers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...owner.headers },
      body: JSON.stringify({
        owner_id: owner.id,
        name: 'pglite-rig',
        gpus: [{ model_name: 'RTX 4090', vram: 24564, driver_version: '550' }],
      }),
    });
    expect(res.status).toBe(201);
    // Twice: a term asked before is one statement, which checks the model names it remembers (discovery-repository.ts).
    for (let i = 0; i < 2; i++) {
      const listed = (await (
        await fetch(`${base}/providers?gpu_model=4090&min_gpus=1`, { headers: owner.headers })
      ).json()) as { name: string }[];
      expect(listed.map((p) => p.name)).toEqual(['pglite-rig']);
    }
    const [service] = [...consul.services.values()];
    expect(service).toMatchObject({
      Name: 'provider-registry',
      Address: '127.0.0.1',
      Port: port,
      Tags: ['gpu', 'registry'],
    });
    expect(JSON.stringify(service)).toContain(`http://127.0.0.1:${port}/health`);
  });

  it('logs a warning for a setting given by its old name (REGISTRY__EVENTS__STREAM)', () => {
    expect(proc.output()).toContain('configuration key events.stream (environment variable REGISTRY__EVENTS__STREAM)');
  });

  it('deregisters and exits 0 on SIGTERM', async () => {
    proc.child.kill('SIGTERM');
    expect((await proc.exited).code).toBe(0);
    expect(consul.calls.some((c) => c.path.startsWith('/v1/agent/service/deregister/'))).toBe(true);
    expect(consul.services.size).toBe(0);
    expect(proc.output()).toContain('shutdown complete');
  });
});
