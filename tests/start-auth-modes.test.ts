/**
 * `pnpm start` in each auth mode the auth service documents, beside the default (EdDSA with a key made in the data
 * folder, which tests/start.test.ts runs): HS256 with the spec's settings (`SECRET_KEY`, `ALGORITHM=HS256`,
 * `ACCESS_TOKEN_EXPIRE_MINUTES`), and EdDSA with a key file the user gives. In each, the initial admin logs in and
 * calls all four services with the token, billing reads the registry with the platform's machine client, the
 * gateway's machine client lists the machines, and a token
 * signed with another key of the same algorithm is refused by every service. One platform at a time (CI has 2 cores).
 * The second one also listens on every address (PLATFORM_HOST=0.0.0.0), and answers on a non-loopback one. Each
 * serves through its gateway: the first through the Node one (PLATFORM_GATEWAY=node), the second through the default
 * (nginx where installed). Then with its embedded NATS (PLATFORM_NATS=embedded): nats-server in operator mode, a
 * provider daemon process that gets its NATS user from auth and whose heartbeats the registry applies over NATS.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { fileCredentials } from '../packages/common/src/index.ts';
import {
  type DaemonProcess,
  startDaemonProcess,
  stopDaemonProcesses,
} from '../tools/provider-daemon/test/support/daemon-process.ts';
import {
  callEveryService,
  forgedToken,
  platformPlace,
  type StartedPlatform,
  services,
  startPlatform,
} from './support/platform-start.ts';

const place = platformPlace(1);
const { ports } = place;

let platform: StartedPlatform | undefined;
const daemons: DaemonProcess[] = [];
afterEach(async () => {
  await stopDaemonProcesses(daemons.splice(0));
  await platform?.stop();
  platform = undefined;
});

/** The header of a JWT. */
const headerOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[0] as string, 'base64url').toString('utf8')) as { alg: string; kid?: string };

/** Every service answers the token's calls, and refuses the forged one with 401. */
async function everyServiceTakes(token: string) {
  // The platform's machine clients made at start-up get tokens too: the gateway's lists the machines.
  const gateway = JSON.parse(
    readFileSync(path.join(platform?.dataDir ?? '', 'auth', 'clients', 'gateway.json'), 'utf8'),
  );
  const issued = await fetch(`http://127.0.0.1:${ports.auth}/api/v1/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      grant_type: 'client_credentials',
      client_id: gateway.client_id,
      client_secret: gateway.client_secret,
    }),
  });
  expect(issued.status).toBe(200);
  const { access_token: gatewayToken } = (await issued.json()) as { access_token: string };
  const listed = await fetch(`http://127.0.0.1:${ports['provider-registry']}/providers`, {
    headers: { authorization: `Bearer ${gatewayToken}` },
  });
  expect(listed.status).toBe(200);
  const { statuses, quote, providerId } = await callEveryService(ports, token);
  expect(statuses, JSON.stringify(quote)).toEqual({ auth: 200, storage: 200, registry: 201, billing: 200 });
  // The quote priced the machine's record at the registry (its 80 GB), which billing read with its machine client.
  expect(quote).toMatchObject({ provider_id: providerId, requested_vram_mb: 81920 });
  const forged = await callEveryService(ports, forgedToken(token));
  expect(forged.statuses).toEqual({ auth: 401, storage: 401, registry: 401, billing: 401 });
}

/**
 * The gateway at `base` (the platform's one origin, whichever engine): its own health, a service's for an operator
 * (this machine), the token's call to the registry and billing behind it, a call without one, a path of no service and
 * its own metrics.
 */
async function theGatewayServes(base: string, token: string) {
  const bearer = { authorization: `Bearer ${token}` };
  expect(await (await fetch(`${base}/health`)).json()).toMatchObject({ status: 'UP', service: 'gateway' });
  expect((await fetch(`${base}/health/billing`)).status).toBe(200);
  expect((await fetch(`${base}/providers`, { headers: bearer })).status).toBe(200);
  expect((await fetch(`${base}/api/v1/billing/sessions`, { headers: bearer })).status).toBe(200);
  const anonymous = await fetch(`${base}/providers`);
  expect(anonymous.status).toBe(401);
  expect(anonymous.headers.get('x-request-id')).toBeTruthy();
  expect(await (await fetch(`${base}/docs`)).json()).toMatchObject({ status: 404, code: 'ROUTE_NOT_FOUND' });
  // Its own metrics, for an operator (this machine): the requests above counted (nginx's a moment after its answer),
  // never a service's metrics.
  const counted = /^gateway_requests_total\{[^}]*route="\/providers"[^}]*status_code="401"\} \d+$/m;
  let metrics = '';
  // nginx's lines travel over UDP, which a busy machine may drop (the count is lost, never the request): each try
  // makes the call again until one is counted.
  await expect
    .poll(
      async () => {
        expect((await fetch(`${base}/providers`)).status).toBe(401);
        metrics = await (await fetch(`${base}/metrics`)).text();
        return metrics;
      },
      { timeout: 60_000, interval: 500 },
    )
    .toMatch(counted);
  expect(metrics).not.toContain('http_requests_total');
}

/** An IPv4 address of this machine other than loopback, if it has one. */
const outsideAddress = Object.values(networkInterfaces())
  .flat()
  .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;

describe('pnpm start, auth modes', () => {
  it('HS256 with SECRET_KEY: auth signs with the secret, publishes no key, and every service verifies with it', {
    timeout: 240_000,
  }, async () => {
    const secret = randomBytes(36).toString('base64'); // 48 characters
    platform = startPlatform(place, {
      SECRET_KEY: secret,
      ALGORITHM: 'HS256',
      ACCESS_TOKEN_EXPIRE_MINUTES: '15',
      // The Node gateway, which runs where nginx is not installed (the default elsewhere in these tests: nginx).
      PLATFORM_GATEWAY: 'node',
    });
    expect(await platform.untilHealthy(), platform.output().slice(-4000)).toEqual([]);
    expect(platform.output()).toContain('[start] tokens: HS256 with the secret in SECRET_KEY');
    expect(platform.output()).toContain('[start] gateway: the Node gateway (tools/gateway; PLATFORM_GATEWAY=node)');
    const token = await platform.adminToken();
    expect(headerOf(token).alg).toBe('HS256');
    const jwks = await fetch(`http://127.0.0.1:${ports.auth}/.well-known/jwks.json`);
    expect(await jwks.json()).toEqual({ keys: [] });
    await everyServiceTakes(token);
    await theGatewayServes(`http://127.0.0.1:${ports.gateway}`, token);
    // No key file was made or looked for.
    expect(readdirSync(path.join(platform.dataDir, 'auth')).filter((f) => f.endsWith('.pem'))).toEqual([]);
  });

  it('EdDSA with the key file the user gives (JWT_PRIVATE_KEY_FILE), listening on every address with PLATFORM_HOST', {
    timeout: 240_000,
  }, async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const keyFile = path.join(mkdtempSync(path.join(tmpdir(), 'auth-key-')), 'ed25519.pem');
    writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    platform = startPlatform(place, { JWT_PRIVATE_KEY_FILE: keyFile, PLATFORM_HOST: '0.0.0.0' });
    expect(await platform.untilHealthy(), platform.output().slice(-4000)).toEqual([]);
    expect(platform.output()).toContain(`[start] tokens: EdDSA with the private key in ${keyFile}`);
    const up = '[start] up (listening on every address: PLATFORM_HOST=0.0.0.0)';
    expect(await platform.untilPrinted(up)).toContain(up);
    const token = await platform.adminToken();
    expect(headerOf(token).alg).toBe('EdDSA');
    // The JWKS publishes the public half of the user's key, and no key was made in the data folder.
    const { keys } = (await (await fetch(`http://127.0.0.1:${ports.auth}/.well-known/jwks.json`)).json()) as {
      keys: { x: string }[];
    };
    expect(keys.map((k) => k.x)).toEqual([publicKey.export({ format: 'jwk' }).x]);
    expect(readdirSync(path.join(platform.dataDir, 'auth')).filter((f) => f.endsWith('.pem'))).toEqual([]);
    await everyServiceTakes(token);
    // The gateway on every address too (nginx where installed, listening on 0.0.0.0).
    await theGatewayServes(`http://127.0.0.1:${ports.gateway}`, token);
    if (outsideAddress) {
      for (const name of services) {
        const res = await fetch(`http://${outsideAddress}:${ports[name]}/health`);
        expect(res.status, `${name} on ${outsideAddress}`).toBe(200);
      }
      const gateway = await fetch(`http://${outsideAddress}:${ports.gateway}/health`);
      expect(gateway.status, `the gateway on ${outsideAddress}`).toBe(200);
    }
  });
});

describe('pnpm start, NATS embedded', () => {
  it('runs nats-server in operator mode: a daemon gets its NATS user from auth and heartbeats on its own subject', {
    timeout: 300_000,
  }, async () => {
    platform = startPlatform(place, { PLATFORM_NATS: 'embedded' });
    expect(await platform.untilHealthy()).toEqual([]);
    const natsUrl = `nats://127.0.0.1:${ports.nats}`;
    expect(await platform.untilPrinted(`nats: ${natsUrl}`)).toContain('(daemons: nats_url');
    const dataDir = platform.dataDir;
    // The server admits no one without a user; the registry's user hears the heartbeats it serves (and every service
    // came up healthy with its own user: its streams and durable consumers, nothing more).
    await expect(connect({ servers: natsUrl, maxReconnectAttempts: 0 })).rejects.toThrow(/authoriz/i);
    const registry = await connect({
      servers: natsUrl,
      authenticator: fileCredentials(path.join(dataDir, 'nats', 'creds', 'provider-registry.creds')),
    });
    try {
      const beats: string[] = [];
      registry.subscribe('registry.heartbeats.>', { callback: (_e, m) => void beats.push(m.subject) });
      await registry.flush();
      // A provider and their daemon's machine client, made as a provider makes one.
      const gateway = `http://127.0.0.1:${ports.gateway}`;
      const json = { 'content-type': 'application/json' };
      const email = `nats-provider-${Date.now()}@example.com`;
      const password = 'a long passphrase';
      const registered = await fetch(`${gateway}/api/v1/auth/register`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ email, password, roles: ['provider'] }),
      });
      expect(registered.status).toBe(201);
      const login = await fetch(`${gateway}/api/v1/auth/login`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ email, password }),
      });
      const { access_token: providerToken } = (await login.json()) as { access_token: string };
      const made = await fetch(`${gateway}/api/v1/auth/clients`, {
        method: 'POST',
        headers: { ...json, authorization: `Bearer ${providerToken}` },
        body: JSON.stringify({ name: 'rig-1', role: 'daemon' }),
      });
      expect(made.status).toBe(201);
      const credentials = path.join(dataDir, 'rig-1.json');
      writeFileSync(credentials, await made.text(), { mode: 0o600 });
      // The daemon, configured as the start-up said: the gateway and the NATS URL, no NATS credentials of its own.
      const daemon = await startDaemonProcess(dataDir, {
        platform_url: gateway,
        nats_url: natsUrl,
        credentials: { file: credentials },
        heartbeat_interval: '1s',
        gpu: { source: 'simulated', simulated_gpus: [{ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 }] },
        workloads: { enabled: false },
      });
      daemons.push(daemon);
      const issued = daemon.log.map((l) => JSON.parse(l) as { msg?: string; owner_id?: string; client_id?: string });
      const user = issued.find((l) => l.msg === 'NATS user issued by auth');
      expect(user).toBeDefined();
      const own = `registry.heartbeats.${user?.owner_id}.${user?.client_id}.${daemon.providerId}`;
      await expect.poll(() => beats.filter((s) => s === own).length, { timeout: 30_000 }).toBeGreaterThan(2);
      expect(beats.filter((s) => s !== own)).toEqual([]);
      // Applied by the registry: the machine is online, seen within the last seconds.
      const machine = await fetch(`${gateway}/providers/${daemon.providerId}`, {
        headers: { authorization: `Bearer ${providerToken}` },
      });
      const record = (await machine.json()) as { status: string; last_seen_at: string };
      expect(record.status).toBe('idle');
      expect(Date.now() - Date.parse(record.last_seen_at)).toBeLessThan(10_000);
      expect(daemon.log.filter((l) => l.includes('sending it over HTTP'))).toEqual([]);
    } finally {
      await registry.close();
    }
  });
});
