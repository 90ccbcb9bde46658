/**
 * The daemon's credentials file is the auth service's answer to the provider's `POST /api/v1/auth/clients`, saved as
 * it is (`curl ... > credentials.json`): the real answer of the real auth service, over HTTP, fed to the daemon's
 * loader, gets the daemon a token and registers the machine for the provider. A rotation's answer does too.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clientCredentials } from '@gpu/client';
import { createLogger } from '@gpu/common';
import { decodeJwt } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { daemonConfigSchema } from '../src/config.ts';
import { loadCredentials } from '../src/credentials.ts';
import { ProviderDaemon } from '../src/daemon.ts';
import { gpuSource } from '../src/gpu/source.ts';

const platform = useAuthAndRegistry();
const dir = mkdtempSync(join(tmpdir(), 'daemon-credentials-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A provider signed up and logged in over HTTP, as a person with curl would. */
async function providerToken(): Promise<{ id: string; token: string }> {
  const email = `provider-${crypto.randomUUID()}@example.com`;
  const password = 'a long provider passphrase';
  const post = (path: string, body: unknown) =>
    fetch(`${platform.authUrl}/api/v1/auth/${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const registered = await post('register', { email, password, roles: ['provider'] });
  expect(registered.status).toBe(201);
  const login = await post('login', { email, password });
  expect(login.status).toBe(200);
  return {
    id: ((await registered.json()) as { user: { id: string } }).user.id,
    token: ((await login.json()) as { access_token: string }).access_token,
  };
}

/** Saves an HTTP answer's body as it is, as `curl ... > file` does. */
async function saved(res: Response, name: string): Promise<string> {
  const file = join(dir, name);
  writeFileSync(file, Buffer.from(await res.arrayBuffer()));
  return file;
}

const configWith = (file: string) =>
  daemonConfigSchema.parse({
    auth_url: platform.authUrl,
    registry_url: platform.registryUrl,
    state_file: join(dir, `state-${crypto.randomUUID()}.json`),
    credentials: { file },
    provider: { name: `rig-${crypto.randomUUID().slice(0, 8)}` },
    gpu: {
      source: 'simulated',
      simulated_gpus: [{ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, driver_version: '580.159.04' }],
    },
  });

describe("the daemon's credentials file", () => {
  it("is the auth service's answer to POST /clients, saved as it is: the daemon gets a token and registers the machine", async () => {
    const provider = await providerToken();
    const res = await fetch(`${platform.authUrl}/api/v1/auth/clients`, {
      method: 'POST',
      headers: { authorization: `Bearer ${provider.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'rig-daemon', role: 'daemon' }),
    });
    expect(res.status).toBe(201);
    const file = await saved(res.clone(), 'created.json');
    const body = (await res.json()) as { client_id: string; client_secret: string; client: { id: string } };
    // The platform's credentials-file fields at the top level (as in the files start-up writes, and as billing's
    // `credentials_file` reads them); the current fields stay: `client.id` is the same ID.
    expect(body).toMatchObject({ client_id: expect.any(String), client_secret: expect.stringMatching(/^gpcs_/) });
    expect(body.client.id).toBe(body.client_id);

    const config = configWith(file);
    const credentials = loadCredentials(config);
    expect(credentials).toEqual({ clientId: body.client_id, clientSecret: body.client_secret });
    const token = clientCredentials({ authUrl: platform.authUrl, ...credentials });
    expect(decodeJwt(await token.get())).toMatchObject({ sub: body.client_id, owner_id: provider.id });
    const daemon = new ProviderDaemon({
      config,
      logger: createLogger({ service: 'provider-daemon-test', instanceId: 't', level: 'silent' }),
      gpus: gpuSource(config.gpu),
      token,
    });
    const machineId = await daemon.attach();
    const machine = await fetch(`${platform.registryUrl}/providers/${machineId}`, {
      headers: { authorization: `Bearer ${provider.token}` },
    });
    expect(((await machine.json()) as { owner_id: string }).owner_id).toBe(provider.id);

    // A rotation's answer is a credentials file too, with the new secret.
    const rotated = await fetch(`${platform.authUrl}/api/v1/auth/clients/${body.client_id}/rotate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${provider.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ grace_period: '0s' }),
    });
    expect(rotated.status).toBe(200);
    const next = loadCredentials(configWith(await saved(rotated, 'rotated.json')));
    expect(next.clientId).toBe(body.client_id);
    expect(next.clientSecret).not.toBe(body.client_secret);
    const renewed = clientCredentials({ authUrl: platform.authUrl, ...next });
    expect(decodeJwt(await renewed.get())).toMatchObject({ sub: body.client_id, owner_id: provider.id });
  });

  it('reads an answer saved from an older auth service (client.id), and names what a bad file lacks', async () => {
    const old = join(dir, 'old.json');
    writeFileSync(old, JSON.stringify({ client: { id: 'c-1', name: 'rig' }, client_secret: 's-1' }));
    expect(loadCredentials(configWith(old))).toEqual({ clientId: 'c-1', clientSecret: 's-1' });
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ client_id: 'c-1' }));
    expect(() => loadCredentials(configWith(bad))).toThrow(/has no client_id and client_secret/);
    expect(() => loadCredentials(configWith(join(dir, 'missing.json')))).toThrow(/cannot read the credentials file/);
  });
});
