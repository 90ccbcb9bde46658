import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { encodeCursor } from '@gpu/common';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { ensureBootstrapClients } from '../src/domain/clients.ts';
import { bearer, decodeJwt, registerAndLogin, startAuth, testConfig, useAuth } from './helpers.ts';

const ADMIN = { email: 'clients-admin@example.com', password: 'initial admin passphrase' };
const auth = useAuth(testConfig({ admin: ADMIN }));
let admin: string;

beforeAll(async () => {
  await ensureInitialAdmin(auth.ctx);
  admin = (await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN })).json().access_token;
});

const api = (method: string, url: string, token?: string, payload?: unknown) =>
  auth.app.inject({
    method: method as 'GET',
    url: `/api/v1/auth${url}`,
    headers: token ? bearer(token) : {},
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });

const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`;

/** POST /token, form-encoded as RFC 6749 says. */
const tokenRequest = (form: Record<string, string>, authorization?: string) =>
  auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/token',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      ...(authorization ? { authorization } : {}),
    },
    payload: new URLSearchParams(form).toString(),
  });

async function createClient(body: Record<string, unknown>, token = admin) {
  const res = await api('POST', '/clients', token, body);
  if (res.statusCode !== 201) throw new Error(`create client: ${res.statusCode} ${res.body}`);
  return res.json() as {
    client: { id: string; name: string; role: string; owner_id: string | null };
    client_secret: string;
  };
}

let names = 0;
const name = (prefix: string) => `${prefix}-${process.pid}-${++names}`;

describe('machine clients (admin API)', () => {
  it('creates a client whose secret is shown once and never stored or listed', async () => {
    const created = await createClient({ name: name('billing'), role: 'service' });
    expect(created.client_secret).toMatch(/^gpcs_[A-Za-z0-9_-]{43}$/);
    expect(created.client).toMatchObject({ role: 'service', owner_id: null, revoked_at: null });
    const row = await auth.db.selectFrom('clients').selectAll().where('id', '=', created.client.id).executeTakeFirst();
    expect(JSON.stringify(row)).not.toContain(created.client_secret);
    const got = await api('GET', `/clients/${created.client.id}`, admin);
    expect(got.statusCode).toBe(200);
    expect(got.body).not.toContain('secret_hash');
    expect(got.body).not.toContain(created.client_secret);
  });

  it('issues a client-credentials token over HTTP Basic, form or JSON body', async () => {
    const { client, client_secret: secret } = await createClient({ name: name('scheduler'), role: 'scheduler' });
    for (const res of [
      await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, secret)),
      await tokenRequest({ grant_type: 'client_credentials', client_id: client.id, client_secret: secret }),
      // RFC 6749 §3.2: unrecognized parameters are ignored here, the one body where unknown fields are not refused.
      await tokenRequest(
        { grant_type: 'client_credentials', resource: 'https://api.example' },
        basic(client.id, secret),
      ),
      await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/token',
        payload: { grant_type: 'client_credentials', client_id: client.id, client_secret: secret },
      }),
    ]) {
      expect(res.statusCode).toBe(200);
      expect(res.headers['cache-control']).toBe('no-store');
      const body = res.json();
      expect(body).toMatchObject({ token_type: 'bearer', expires_in: 900 });
      expect(body.refresh_token).toBeUndefined();
      const claims = decodeJwt(body.access_token);
      expect(claims).toMatchObject({ sub: client.id, client_id: client.id, roles: ['scheduler'] });
      expect(claims.owner_id).toBeUndefined();
    }
  });

  it('refuses bad credentials with 401 invalid_client, and malformed requests with the RFC error', async () => {
    const { client, client_secret: secret } = await createClient({ name: name('gw'), role: 'gateway' });
    const cases = [
      await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, `${secret}x`)),
      await tokenRequest({ grant_type: 'client_credentials' }, basic(crypto.randomUUID(), secret)),
      await tokenRequest({ grant_type: 'client_credentials' }, basic('not-a-uuid', secret)),
      await tokenRequest({ grant_type: 'client_credentials', client_id: client.id }),
      await tokenRequest({ grant_type: 'client_credentials' }),
    ];
    for (const res of cases) {
      expect(res.statusCode).toBe(401);
      expect(res.json()).toMatchObject({ code: 'INVALID_CLIENT', error: 'invalid_client' });
      expect(res.headers['www-authenticate']).toMatch(/^Basic/);
    }
    const grant = await tokenRequest({ grant_type: 'password' }, basic(client.id, secret));
    expect(grant.statusCode).toBe(400);
    expect(grant.json()).toMatchObject({ error: 'unsupported_grant_type' });
    const both = await tokenRequest(
      { grant_type: 'client_credentials', client_id: client.id, client_secret: secret },
      basic(client.id, secret),
    );
    expect(both.statusCode).toBe(400);
    expect(both.json()).toMatchObject({ error: 'invalid_request' });
    const missing = await tokenRequest({}, basic(client.id, secret));
    expect(missing.statusCode).toBe(400);
  });

  it('rotates a secret: the new one works, the old one for the grace period only; revoked clients get nothing', async () => {
    const { client, client_secret: first } = await createClient({ name: name('rot'), role: 'service' });
    const rotated = await api('POST', `/clients/${client.id}/rotate`, admin, { grace_period: '1h' });
    expect(rotated.statusCode).toBe(200);
    const second = rotated.json().client_secret as string;
    expect(second).not.toBe(first);
    expect((await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, second))).statusCode).toBe(200);
    expect((await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, first))).statusCode).toBe(200);

    const third = (await api('POST', `/clients/${client.id}/rotate`, admin, { grace_period: '0s' })).json()
      .client_secret as string;
    expect((await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, second))).statusCode).toBe(401);
    expect((await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, third))).statusCode).toBe(200);

    const revoked = await api('DELETE', `/clients/${client.id}`, admin);
    expect(revoked.statusCode).toBe(200);
    expect(revoked.json().revoked_at).not.toBeNull();
    expect((await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, third))).statusCode).toBe(401);
    expect((await api('POST', `/clients/${client.id}/rotate`, admin)).statusCode).toBe(409);
    const badGrace = await api('POST', `/clients/${client.id}/rotate`, admin, { grace_period: 'soon' });
    expect(badGrace.statusCode).toBe(400);
  });

  it('keeps a previous secret at most a week: a longer grace is 400, never a 500', async () => {
    const { client } = await createClient({ name: name('grace'), role: 'service' });
    for (const grace_period of ['8d', '300000y']) {
      const res = await api('POST', `/clients/${client.id}/rotate`, admin, { grace_period });
      expect(res.statusCode, grace_period).toBe(400);
      expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR', errors: [{ path: 'body.grace_period' }] });
    }
    expect((await api('POST', `/clients/${client.id}/rotate`, admin, { grace_period: '7d' })).statusCode).toBe(200);
  });

  it('refuses a second active client of the same name, and names that logs and files cannot carry', async () => {
    const taken = name('dup');
    await createClient({ name: taken, role: 'service' });
    const again = await api('POST', '/clients', admin, { name: taken, role: 'gateway' });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('CLIENT_NAME_TAKEN');
    for (const bad of ['', 'a b', 'x\u0000y', '../etc', 'x'.repeat(101)]) {
      expect((await api('POST', '/clients', admin, { name: bad, role: 'service' })).statusCode).toBe(400);
    }
  });
});

describe('client names, unique per owner', () => {
  it("lets two providers name a daemon alike, refuses only the same owner's duplicate, and keeps tokens apart", async () => {
    const a = await registerAndLogin(auth.app, { roles: ['provider'] });
    const b = await registerAndLogin(auth.app, { roles: ['provider'] });
    const shared = name('daemon');
    const mine = await createClient({ name: shared, role: 'daemon' }, a.tokens.access_token);
    const theirs = await createClient({ name: shared, role: 'daemon' }, b.tokens.access_token);
    expect(theirs.client.id).not.toBe(mine.client.id);

    const again = await api('POST', '/clients', a.tokens.access_token, { name: shared, role: 'daemon' });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('CLIENT_NAME_TAKEN');
    expect(again.body).not.toContain(b.user.id);
    const byAdmin = await api('POST', '/clients', admin, { name: shared, role: 'daemon', owner_id: b.user.id });
    expect(byAdmin.json().code).toBe('CLIENT_NAME_TAKEN');

    // Each token names its own client and owner: the name plays no part in the grant.
    for (const [created, owner] of [
      [mine, a],
      [theirs, b],
    ] as const) {
      const res = await tokenRequest(
        { grant_type: 'client_credentials' },
        basic(created.client.id, created.client_secret),
      );
      expect(decodeJwt(res.json().access_token)).toMatchObject({
        sub: created.client.id,
        client_id: created.client.id,
        owner_id: owner.user.id,
      });
    }
    const crossed = await tokenRequest(
      { grant_type: 'client_credentials' },
      basic(mine.client.id, theirs.client_secret),
    );
    expect(crossed.statusCode).toBe(401);

    // A revoked client's name is free again for its owner.
    expect((await api('DELETE', `/clients/${mine.client.id}`, a.tokens.access_token)).statusCode).toBe(200);
    expect((await api('POST', '/clients', a.tokens.access_token, { name: shared, role: 'daemon' })).statusCode).toBe(
      201,
    );
  });

  it('answers two simultaneous creations of one name for one owner with one 201 and one 409', async () => {
    const provider = await registerAndLogin(auth.app, { roles: ['provider'] });
    const other = await registerAndLogin(auth.app, { roles: ['provider'] });
    for (let round = 0; round < 5; round++) {
      const same = name('race');
      const answers = await Promise.all([
        api('POST', '/clients', provider.tokens.access_token, { name: same, role: 'daemon' }),
        api('POST', '/clients', provider.tokens.access_token, { name: same, role: 'daemon' }),
        api('POST', '/clients', other.tokens.access_token, { name: same, role: 'daemon' }),
      ]);
      expect(answers.map((r) => r.statusCode).sort()).toEqual([201, 201, 409]);
      expect(answers[2]!.statusCode).toBe(201);
      const rows = await auth.db
        .selectFrom('clients')
        .select('owner_id')
        .where('name', '=', same)
        .where('revoked_at', 'is', null)
        .execute();
      expect(rows.map((r) => r.owner_id).sort()).toEqual([provider.user.id, other.user.id].sort());
    }
  });

  it("never takes a provider's daemon for a platform client of the same name at start-up", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'auth-clients-'));
    const platformName = `scheduler-${process.pid}-${Date.now()}`;
    const provider = await registerAndLogin(auth.app, { roles: ['provider'] });
    // The daemon takes the name before the platform client exists.
    const daemon = await createClient({ name: platformName, role: 'daemon' }, provider.tokens.access_token);
    const boot = await startAuth(
      auth.db,
      testConfig({ clients: { bootstrap: `${platformName}:scheduler`, secrets_dir: dir } }),
    );
    try {
      expect((await ensureBootstrapClients(boot.ctx)).map((f) => path.basename(f))).toEqual([`${platformName}.json`]);
      const file = JSON.parse(readFileSync(path.join(dir, `${platformName}.json`), 'utf8'));
      expect(file.client_id).not.toBe(daemon.client.id);
      const platformToken = await tokenRequest(
        { grant_type: 'client_credentials' },
        basic(file.client_id, file.client_secret),
      );
      expect(decodeJwt(platformToken.json().access_token)).toMatchObject({ roles: ['scheduler'] });
      // The daemon is untouched: active, its secret still good, its token still its owner's daemon.
      const got = await api('GET', `/clients/${daemon.client.id}`, provider.tokens.access_token);
      expect(got.json()).toMatchObject({ revoked_at: null, rotated_at: null, role: 'daemon' });
      const daemonToken = await tokenRequest(
        { grant_type: 'client_credentials' },
        basic(daemon.client.id, daemon.client_secret),
      );
      expect(decodeJwt(daemonToken.json().access_token)).toMatchObject({
        roles: ['daemon'],
        owner_id: provider.user.id,
      });
      // A second start finds its own client, not the daemon.
      expect(await ensureBootstrapClients(boot.ctx)).toEqual([]);
      // And the platform's own names stay unique among platform clients.
      const dup = await api('POST', '/clients', admin, { name: platformName, role: 'service' });
      expect(dup.json().code).toBe('CLIENT_NAME_TAKEN');
    } finally {
      await boot.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('daemon clients (providers manage their own)', () => {
  it('lets a provider create a daemon acting for themselves, whose token names them as owner', async () => {
    const provider = await registerAndLogin(auth.app, { roles: ['provider'] });
    const created = await createClient({ name: name('rack'), role: 'daemon' }, provider.tokens.access_token);
    expect(created.client.owner_id).toBe(provider.user.id);
    const res = await tokenRequest(
      { grant_type: 'client_credentials' },
      basic(created.client.id, created.client_secret),
    );
    expect(decodeJwt(res.json().access_token)).toMatchObject({
      sub: created.client.id,
      client_id: created.client.id,
      roles: ['daemon'],
      owner_id: provider.user.id,
    });
  });

  it("keeps a provider to their own daemons: no other roles, no other owner's clients", async () => {
    const provider = await registerAndLogin(auth.app, { roles: ['provider'] });
    const other = await registerAndLogin(auth.app, { roles: ['provider'] });
    const theirs = await createClient({ name: name('theirs'), role: 'daemon' }, other.tokens.access_token);
    const token = provider.tokens.access_token;
    expect((await api('POST', '/clients', token, { name: name('svc'), role: 'service' })).json().code).toBe(
      'NOT_CLIENT_OWNER',
    );
    expect(
      (await api('POST', '/clients', token, { name: name('x'), role: 'daemon', owner_id: other.user.id })).statusCode,
    ).toBe(403);
    expect((await api('GET', `/clients/${theirs.client.id}`, token)).statusCode).toBe(404);
    expect((await api('DELETE', `/clients/${theirs.client.id}`, token)).statusCode).toBe(404);
    expect((await api('POST', `/clients/${theirs.client.id}/rotate`, token)).statusCode).toBe(404);
    const mine = await createClient({ name: name('mine'), role: 'daemon' }, token);
    const list = await api('GET', '/clients', token);
    expect(list.json().map((c: { id: string }) => c.id)).toEqual([mine.client.id]);
    const renter = await registerAndLogin(auth.app);
    expect((await api('GET', '/clients', renter.tokens.access_token)).statusCode).toBe(403);
  });

  it('refuses a daemon whose owner is not (or no longer) a provider', async () => {
    const renter = await registerAndLogin(auth.app);
    const forRenter = await api('POST', '/clients', admin, {
      name: name('d'),
      role: 'daemon',
      owner_id: renter.user.id,
    });
    expect(forRenter.json().code).toBe('OWNER_NOT_PROVIDER');
    expect((await api('POST', '/clients', admin, { name: name('d'), role: 'daemon' })).statusCode).toBe(400);
    expect(
      (await api('POST', '/clients', admin, { name: name('s'), role: 'service', owner_id: renter.user.id })).statusCode,
    ).toBe(400);

    const provider = await registerAndLogin(auth.app, { roles: ['provider'] });
    const daemon = await createClient({ name: name('d'), role: 'daemon' }, provider.tokens.access_token);
    await api('PUT', `/users/${provider.user.id}/roles`, admin, { roles: ['renter'] });
    const res = await tokenRequest({ grant_type: 'client_credentials' }, basic(daemon.client.id, daemon.client_secret));
    expect(res.statusCode).toBe(401);
  });

  it('pages the admin list with the platform cursor', async () => {
    for (let i = 0; i < 3; i++) await createClient({ name: name('page'), role: 'service' });
    const first = await api('GET', '/clients?limit=2', admin);
    expect(first.json()).toHaveLength(2);
    const cursor = first.headers['x-next-cursor'] as string;
    expect(first.headers.link).toContain(`cursor=${cursor}`);
    const second = await api('GET', `/clients?limit=2&cursor=${cursor}`, admin);
    expect(second.json()[0].id).not.toBe(first.json()[1].id);
    expect((await api('GET', '/clients?cursor=garbage', admin)).json().code).toBe('INVALID_CURSOR');
    // Forged in the cursor's own format: a year-0 time and a UUID-shaped ID of dashes would have reached SQL (500).
    for (const forged of [
      ['0000-01-01T00:00:00.000000Z', '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9f'],
      ['2026-01-01T00:00:00.000000Z', '-'.repeat(36)],
    ]) {
      const res = await api('GET', `/clients?cursor=${encodeCursor(forged)}`, admin);
      expect(res.statusCode).toBe(400);
      expect(res.json().code).toBe('INVALID_CURSOR');
    }
  });
});

describe('audit and rate limits', () => {
  it('logs admin actions and token issuance with the actor', async () => {
    const { client, client_secret: secret } = await createClient({ name: name('audit'), role: 'service' });
    await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, secret));
    await tokenRequest({ grant_type: 'client_credentials' }, basic(client.id, 'wrong'));
    const lines = auth.logs
      .lines()
      .filter((l) => l.audit === true && (l.client_id === client.id || l.target === `client:${client.id}`));
    expect(lines.map((l) => l.action)).toEqual(['client_created', 'token_issued', 'client_token_refused']);
    // The creation and the refusal are in the audit trail too (a token issued is in the log only: it is routine).
    const trail = await auth.db
      .selectFrom('audit_events')
      .select(['action', 'outcome'])
      .where('target', '=', `client:${client.id}`)
      .orderBy('at')
      .execute();
    expect(trail).toEqual([
      { action: 'client_created', outcome: 'succeeded' },
      { action: 'client_token_refused', outcome: 'refused' },
    ]);
    expect(lines[0]!.actor_id).toBeTruthy();
    expect(JSON.stringify(lines)).not.toContain(secret);
  });

  it('answers 429 with Retry-After after repeated failed attempts for one client', async () => {
    const limited = await startAuth(
      auth.db,
      testConfig({ rate_limit: { enabled: true, token_failures_per_client: '3/15m' } }),
    );
    try {
      const id = crypto.randomUUID();
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await limited.app.inject({
          method: 'POST',
          url: '/api/v1/auth/token',
          payload: { grant_type: 'client_credentials', client_id: id, client_secret: 'guess' },
        });
        statuses.push(res.statusCode);
        if (res.statusCode === 429) expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
      }
      expect(statuses).toEqual([401, 401, 401, 429, 429]);
    } finally {
      await limited.close();
    }
  });

  it("counts a client's failures per address: a stranger who knows its ID cannot lock its program out", async () => {
    const limited = await startAuth(
      auth.db,
      testConfig({ rate_limit: { enabled: true, token_failures_per_client: '3/15m' } }),
    );
    try {
      const { client, client_secret: secret } = await createClient({ name: name('locked'), role: 'scheduler' });
      const ask = (clientSecret: string, ip: string) =>
        limited.app.inject({
          method: 'POST',
          url: '/api/v1/auth/token',
          remoteAddress: ip,
          payload: { grant_type: 'client_credentials', client_id: client.id, client_secret: clientSecret },
        });
      const stranger: number[] = [];
      for (let i = 0; i < 5; i++) stranger.push((await ask('guess', '203.0.113.9')).statusCode);
      expect(stranger).toEqual([401, 401, 401, 429, 429]);
      expect((await ask(secret, '198.51.100.1')).statusCode).toBe(200);
      expect((await ask(secret, '203.0.113.9')).statusCode).toBe(429);
    } finally {
      await limited.close();
    }
  });
});

describe('clients the platform creates at start-up', () => {
  it('creates each listed client once, writes its secret to a 0600 file, and reissues a lost one', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'auth-clients-'));
    const suffix = `${process.pid}-${Date.now()}`;
    const boot = await startAuth(
      auth.db,
      testConfig({ clients: { bootstrap: `billing-${suffix}:service,gw-${suffix}:gateway`, secrets_dir: dir } }),
    );
    try {
      const written = await ensureBootstrapClients(boot.ctx);
      expect(written.map((f) => path.basename(f))).toEqual([`billing-${suffix}.json`, `gw-${suffix}.json`]);
      const file = path.join(dir, `billing-${suffix}.json`);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const first = JSON.parse(readFileSync(file, 'utf8'));
      expect(first).toMatchObject({ role: 'service', name: `billing-${suffix}` });
      const res = await tokenRequest({ grant_type: 'client_credentials' }, basic(first.client_id, first.client_secret));
      expect(res.statusCode).toBe(200);

      expect(await ensureBootstrapClients(boot.ctx)).toEqual([]);
      rmSync(file);
      await ensureBootstrapClients(boot.ctx);
      const second = JSON.parse(readFileSync(file, 'utf8'));
      expect(second.client_id).toBe(first.client_id);
      expect(second.client_secret).not.toBe(first.client_secret);
      expect(
        (await tokenRequest({ grant_type: 'client_credentials' }, basic(first.client_id, first.client_secret)))
          .statusCode,
      ).toBe(401);
    } finally {
      await boot.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
