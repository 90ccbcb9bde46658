/**
 * API keys across the platform: every service (the registry, billing, storage) checks a key's scopes against the
 * route's, before anything else; a key reaches only its user's data; a revoked key gets no token, and its last token
 * dies within `api_keys.token_ttl` (and the services' 5 s clock tolerance) at every service. Against the real auth service (EdDSA, JWKS), registry, billing
 * and storage.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiKeyToken, registryClient } from '../packages/client/src/index.ts';
import { registerAndLogin } from '../services/auth/test/helpers.ts';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { startService, type TestService } from '../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const TOKEN_TTL_MS = 2000;
const platform = useAuthAndRegistry({ api_keys: { token_ttl: `${TOKEN_TTL_MS}ms` } });
let billing: BillingHarness;
let billingUrl: string;
let storage: TestService;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  storage = await startService({
    listen: true,
    settings: {
      access: {
        jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
        issuer: platform.auth.config.jwt.issuer,
        audience: platform.auth.config.jwt.audience,
      },
    },
  });
});
afterAll(async () => {
  await billing?.close();
  await storage?.close();
});

interface User {
  id: string;
  signIn: Record<string, string>;
  walletId: string;
}

/** A renter signed in, with a funded wallet. */
async function renter(): Promise<User> {
  const { user, tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
  const signIn = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await fetch(`${billingUrl}/api/v1/wallet`, {
    method: 'POST',
    headers: { ...signIn, 'content-type': 'application/json' },
    body: JSON.stringify({ owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) }),
  });
  const walletId = ((await wallet.json()) as { id: string }).id;
  await billing.credit(walletId, '100');
  return { id: user.id, signIn, walletId };
}

/** A key of `scopes` for the user, and the bearer header of a token it was exchanged for. */
async function keyOf(user: User, scopes: string[]) {
  const created = await fetch(`${platform.authUrl}/api/v1/auth/keys`, {
    method: 'POST',
    headers: { ...user.signIn, 'content-type': 'application/json' },
    body: JSON.stringify({ name: `key-${randomBytes(4).toString('hex')}`, scopes }),
  });
  expect(created.status).toBe(201);
  const { api_key: apiKey, key } = (await created.json()) as { api_key: string; key: { id: string } };
  const headers = await exchange(apiKey);
  if (!headers) throw new Error('a new key was refused');
  return { apiKey, id: key.id as string, headers };
}

async function exchange(apiKey: string): Promise<Record<string, string> | null> {
  const res = await fetch(`${platform.authUrl}/api/v1/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'api_key', api_key: apiKey }),
  });
  return res.ok ? { authorization: `Bearer ${((await res.json()) as { access_token: string }).access_token}` } : null;
}

/** How the exchange of a key was refused. */
async function exchangeRefusal(apiKey: string) {
  const res = await fetch(`${platform.authUrl}/api/v1/auth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'api_key', api_key: apiKey }),
  });
  return { status: res.status, code: ((await res.json()) as { code?: string }).code };
}

const call = async (url: string, headers: Record<string, string>, init: { method?: string; body?: unknown } = {}) => {
  const res = await fetch(url, {
    method: init.method ?? 'GET',
    headers: { ...headers, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
  });
  const text = await res.text();
  return { status: res.status, code: (text.startsWith('{') ? JSON.parse(text).code : undefined) as string | undefined };
};

const offers = () => `${platform.registryUrl}/offers?gpu_model=H100`;
const balance = (u: User) => `${billingUrl}/api/v1/wallet/${u.walletId}/balance`;
const startSession = (u: User) => ({
  url: `${billingUrl}/api/v1/billing/start-session`,
  body: {
    user_id: u.id,
    wallet_id: u.walletId,
    provider_id: u.id,
    gpu_count: 1,
    requested_vram_mb: 0,
    estimated_power_w: 0,
  },
});
const withdraw = (u: User) => ({
  url: `${billingUrl}/api/v1/wallet/${u.walletId}/withdraw`,
  body: { amount: '1', destination: base58Encode(randomBytes(32)) },
});
const object = (key: string) => `${storage.url}/objects/${encodeURIComponent(key)}`;
const copy = () => `${storage.url}/objects/copy`;
const copied = (from: string, to: string) => ({ source: { key: from }, destination: { key: to } });

describe('API keys at every service', () => {
  it('a read-only key searches offers and reads a balance, but cannot start a session, withdraw or upload', async () => {
    const u = await renter();
    const { headers } = await keyOf(u, ['read']);
    expect((await call(offers(), headers)).status).toBe(200);
    expect((await call(balance(u), headers)).status).toBe(200);
    for (const refused of [
      await call(startSession(u).url, headers, { method: 'POST', body: startSession(u).body }),
      await call(withdraw(u).url, headers, { method: 'POST', body: withdraw(u).body }),
      await call(object('notes.txt'), headers, { method: 'PUT', body: 'x' }),
      await call(copy(), headers, { method: 'POST', body: copied('notes.txt', 'kept.txt') }),
    ]) {
      expect(refused).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
    }
  });

  it('a storage-write key uploads, but moves no money and reads nothing', async () => {
    const u = await renter();
    const { headers } = await keyOf(u, ['storage:write']);
    const put = await fetch(object('data.csv'), { method: 'PUT', headers, body: 'a,b\n' });
    expect(put.status).toBe(201);
    expect(await call(withdraw(u).url, headers, { method: 'POST', body: withdraw(u).body })).toEqual({
      status: 403,
      code: 'INSUFFICIENT_SCOPE',
    });
    expect((await call(balance(u), headers)).status).toBe(403);
    expect((await call(object('data.csv'), headers)).status).toBe(403);
    // A presigned URL to write needs storage:write, one to read storage:read.
    const presign = (method: string) =>
      call(`${storage.url}/presigned-url/data.csv`, headers, { method: 'POST', body: { method } });
    expect((await presign('PUT')).status).toBe(200);
    expect(await presign('GET')).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
    // A copy reads its source: storage:write alone copies nothing; with storage:read (or read) it copies.
    const body = copied('data.csv', 'copy.csv');
    expect(await call(copy(), headers, { method: 'POST', body })).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
    for (const scopes of [
      ['storage:write', 'storage:read'],
      ['storage:write', 'read'],
    ] as const) {
      expect((await call(copy(), (await keyOf(u, [...scopes])).headers, { method: 'POST', body })).status).toBe(201);
    }
    // So does a part copied into an upload: the upload is the key's to write, the source needs read too.
    const started = await fetch(`${storage.url}/uploads`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'parts.csv' }),
    });
    expect(started.status).toBe(201);
    const part = `${storage.url}/uploads/${((await started.json()) as { upload_id: string }).upload_id}/parts/1/copy`;
    const from = { source: { key: 'data.csv' }, source_etag: `"${createHash('md5').update('a,b\n').digest('hex')}"` };
    expect(await call(part, headers, { method: 'POST', body: from })).toEqual({
      status: 403,
      code: 'INSUFFICIENT_SCOPE',
    });
    const reading = (await keyOf(u, ['storage:write', 'read'])).headers;
    expect((await call(part, reading, { method: 'POST', body: from })).status).toBe(200);
    // Nor does it price a machine: a quote with a provider's rates needs offers.
    const quote = await call(`${billingUrl}/api/v1/pricing/calculate`, headers, {
      method: 'POST',
      body: { gpu_model: 'H100', gpu_count: 1, provider_id: u.id },
    });
    expect(quote).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
  });

  it("a sessions key starts no workload that reads the renter's objects without storage:read", async () => {
    const u = await renter();
    const { headers } = await keyOf(u, ['sessions']);
    const start = startSession(u);
    const refused = await call(start.url, headers, {
      method: 'POST',
      body: {
        ...start.body,
        workload: { command: ['true'], max_runtime_seconds: 60, inputs: [{ key: 'secret.txt' }], network: true },
      },
    });
    expect(refused).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
  });

  it("a key reaches only its own user's data", async () => {
    const owner = await renter();
    const intruder = await renter();
    await fetch(object('secret.txt'), { method: 'PUT', headers: owner.signIn, body: 'mine' });
    const { headers } = await keyOf(intruder, ['read', 'storage:read', 'wallet:read']);
    expect(await call(balance(owner), headers)).toEqual({ status: 403, code: 'NOT_WALLET_HOLDER' });
    const bucket = storage.config.object_store.default_bucket;
    const theirs = await call(`${storage.url}/objects/${bucket}/users/${owner.id}/secret.txt`, headers);
    expect(theirs).toEqual({ status: 403, code: 'FOLDER_NOT_OWNED' });
    // Its own folder is another place: the owner's key name is nothing of the intruder's.
    expect((await call(object('secret.txt'), headers)).status).toBe(404);
  });

  it('a revoked key gets no token, says so, and its last token dies at every service within the token lifetime', async () => {
    const u = await renter();
    const { apiKey, id, headers } = await keyOf(u, ['read', 'storage:read']);
    const everywhere = [offers(), balance(u), `${storage.url}/objects/list`];
    // Its token works at every service until the key is revoked.
    for (const url of everywhere) expect((await call(url, headers)).status, url).toBe(200);
    const revoked = await fetch(`${platform.authUrl}/api/v1/auth/keys/${id}`, { method: 'DELETE', headers: u.signIn });
    expect(revoked.status).toBe(200);
    // The exchange says why, and auth refuses the token it had at once.
    expect(await exchangeRefusal(apiKey)).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    expect(await call(`${platform.authUrl}/api/v1/auth/me`, headers)).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    // Past its lifetime and the services' clock tolerance (5 s): refused everywhere.
    await new Promise((r) => setTimeout(r, TOKEN_TTL_MS + 6000));
    for (const url of everywhere) expect((await call(url, headers)).status, url).toBe(401);
    // A program with the typed client asks for a new token there, and hears why it gets none.
    const program = registryClient({
      baseUrl: platform.registryUrl,
      token: apiKeyToken({ authUrl: platform.authUrl, apiKey }),
    });
    await expect(program.GET('/offers', { params: { query: { gpu_model: 'H100' } } })).rejects.toThrow(
      /API_KEY_REVOKED/,
    );
  });
});
