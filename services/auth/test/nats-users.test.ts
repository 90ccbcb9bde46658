/**
 * Provider daemons' NATS users (POST /nats-users), against the tests' NATS server in operator mode with the trust it
 * runs with: a daemon's user publishes on subjects naming its owner and itself and nowhere else (the server refuses
 * the rest: another owner's machine, another daemon of its owner), takes only its own answers; a revoked client gets
 * no new user, and the last one stops working when it expires. Only a daemon's machine client asks.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DAEMON_NATS_SUBJECTS, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { firstStatus, testEnv } from '@gpu/common/testing';
import { createUser, fromSeed } from '@nats-io/nkeys';
import { connect, jwtAuthenticator, type NatsConnection } from '@nats-io/transport-node';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../src/domain/clients.ts';
import { issueClientToken } from '../src/domain/token-pair.ts';
import { bearer, registerAndLogin, startAuth, type TestAuth, testConfig, useAuth } from './helpers.ts';

const TTL_SECONDS = 3;
const auth = useAuth(testConfig({ nats: { issuer_file: testEnv.natsTrust, user_ttl: `${TTL_SECONDS}s` } }));
const API = '/api/v1/auth';
let platform: NatsConnection;

beforeAll(async () => {
  platform = await connect(testEnv.natsConnectOptions());
});
afterAll(async () => {
  await platform.close();
});

interface Daemon {
  owner: string;
  /** The owner's own sign-in. */
  ownerHeaders: Record<string, string>;
  client: string;
  /** The daemon's access token (client credentials). */
  headers: Record<string, string>;
}

/** A provider and a daemon client of theirs, with the daemon's access token. */
async function daemon(owner?: Awaited<ReturnType<typeof registerAndLogin>>): Promise<Daemon> {
  const provider = owner ?? (await registerAndLogin(auth.app, { roles: ['provider'] }));
  const res = await auth.app.inject({
    method: 'POST',
    url: `${API}/clients`,
    headers: bearer(provider.tokens.access_token),
    payload: { name: `rig-${randomUUID().slice(0, 8)}`, role: 'daemon' },
  });
  expect(res.statusCode, res.body).toBe(201);
  const { client, client_secret } = res.json();
  const token = await auth.app.inject({
    method: 'POST',
    url: `${API}/token`,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: client.id,
      client_secret,
    }).toString(),
  });
  expect(token.statusCode, token.body).toBe(200);
  return {
    owner: provider.user.id,
    ownerHeaders: bearer(provider.tokens.access_token),
    client: client.id,
    headers: bearer(token.json().access_token),
  };
}

const ask = (headers: Record<string, string>, public_key: string, app = auth.app) =>
  app.inject({ method: 'POST', url: `${API}/nats-users`, headers, payload: { public_key } });

/** A NATS connection as the daemon makes one: its own key, the issued JWT, its own inbox prefix. */
async function connectAs(d: Daemon) {
  const key = createUser();
  const res = await ask(d.headers, key.getPublicKey());
  expect(res.statusCode, res.body).toBe(201);
  const user = res.json();
  const nc = await connect({
    servers: testEnv.natsUrl,
    authenticator: jwtAuthenticator(user.jwt, key.getSeed()),
    inboxPrefix: `_INBOX.${d.client}`,
    maxReconnectAttempts: 0,
  });
  return { nc, user };
}

describe('NATS users of provider daemons', () => {
  it('publish heartbeats and usage naming their owner and themselves, and nowhere else', async () => {
    const mine = await daemon();
    const other = await daemon();
    const { nc, user } = await connectAs(mine);
    try {
      const own = `${mine.owner}.${mine.client}`;
      expect(user).toMatchObject({
        owner_id: mine.owner,
        client_id: mine.client,
        publish: [`${DAEMON_NATS_SUBJECTS.heartbeats}.${own}.*`, `${DAEMON_NATS_SUBJECTS.usage}.${own}.*`],
        subscribe: [`_INBOX.${mine.client}.>`, `${DAEMON_NATS_SUBJECTS.nudges}.${mine.owner}.*`],
      });
      expect(new Date(user.expires_at).getTime()).toBeGreaterThan(Date.now());
      const seen: string[] = [];
      const sub = platform.subscribe(`${DAEMON_NATS_SUBJECTS.heartbeats}.>`, {
        callback: (_e, m) => {
          seen.push(m.subject);
        },
      });
      await platform.flush();
      const machine = randomUUID();
      const refused = firstStatus(nc, (s) => s.type === 'error');
      nc.publish(`${DAEMON_NATS_SUBJECTS.heartbeats}.${own}.${machine}`);
      // Another owner's daemon, and the bare subject that names no sender.
      const theirs = `${DAEMON_NATS_SUBJECTS.heartbeats}.${other.owner}.${other.client}.${machine}`;
      nc.publish(theirs);
      expect(await refused).toMatchObject({
        type: 'error',
        error: { name: 'PermissionViolationError', operation: 'publish', subject: theirs },
      });
      nc.publish(`${DAEMON_NATS_SUBJECTS.heartbeats}.${machine}`);
      await nc.flush();
      await platform.flush();
      // Waited for up to 20 s (1 s by default), which a busy machine can need and costs nothing once it is there.
      await expect
        .poll(() => seen, { timeout: 20_000 })
        .toEqual([`${DAEMON_NATS_SUBJECTS.heartbeats}.${own}.${machine}`]);
      sub.unsubscribe();
    } finally {
      await nc.close().catch(() => {});
    }
  });

  it("takes only its own answers and its owner's nudges: the server refuses other subscriptions", async () => {
    const mine = await daemon();
    const other = await daemon();
    const { nc } = await connectAs(mine);
    try {
      // Billing's nudge to one of its owner's machines reaches it.
      const machine = randomUUID();
      const nudges = nc.subscribe(`${DAEMON_NATS_SUBJECTS.nudges}.${mine.owner}.${machine}`, { max: 1 });
      await nc.flush();
      platform.publish(`${DAEMON_NATS_SUBJECTS.nudges}.${mine.owner}.${machine}`, '{}');
      for await (const m of nudges) expect(m.subject).toBe(`${DAEMON_NATS_SUBJECTS.nudges}.${mine.owner}.${machine}`);
      for (const subject of ['_INBOX.>', `${DAEMON_NATS_SUBJECTS.nudges}.${other.owner}.*`]) {
        const listening = nc.subscribe(subject);
        await expect(
          (async () => {
            for await (const _ of listening) break;
          })(),
          subject,
        ).rejects.toThrow(/permissions violation for subscription/i);
      }
    } finally {
      await nc.close().catch(() => {});
    }
  });

  it('issues nothing to a revoked client, and drops the last user it had when that expires', async () => {
    const d = await daemon();
    const { nc } = await connectAs(d);
    const closed = nc.closed();
    const statuses: string[] = [];
    void (async () => {
      for await (const s of nc.status()) statuses.push(`${s.type} ${'error' in s ? String(s.error) : ''}`);
    })();
    // Its owner revokes it.
    const revoked = await auth.app.inject({
      method: 'DELETE',
      url: `${API}/clients/${d.client}`,
      headers: d.ownerHeaders,
    });
    expect(revoked.statusCode, revoked.body).toBe(200);
    const again = await auth.app.inject({
      method: 'POST',
      url: `${API}/nats-users`,
      headers: { ...d.headers, 'x-request-id': 'req-nats-refused' },
      remoteAddress: '198.51.100.61',
      payload: { public_key: createUser().getPublicKey() },
    });
    expect([again.statusCode, again.json().code]).toEqual([401, 'CLIENT_REVOKED']);
    // In the audit trail, from where and in which request.
    const refusal = await auth.db
      .selectFrom('audit_events')
      .select(['outcome', 'address', 'request_id', 'actor_id', 'details'])
      .where('action', '=', 'nats_user_refused')
      .where('target', '=', `client:${d.client}`)
      .execute();
    expect(refusal).toMatchObject([
      { outcome: 'refused', address: '198.51.100.61', request_id: 'req-nats-refused', details: { reason: 'revoked' } },
    ]);
    // Its access token is still within its life; the NATS user is not renewed and the server drops it at expiry.
    const started = Date.now();
    const end = await closed;
    expect(Date.now() - started).toBeLessThan((TTL_SECONDS + 10) * 1000);
    expect(`${end?.message ?? ''} ${statuses.join(' ')}`).toMatch(/expired/i);
  });

  it('refuses who is not a daemon, a key that is not a user key, and a platform that issues none', async () => {
    const d = await daemon();
    const renter = await registerAndLogin(auth.app, { roles: ['renter'] });
    expect((await ask(bearer(renter.tokens.access_token), createUser().getPublicKey())).statusCode).toBe(403);
    const { client } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
      name: `svc-${randomUUID()}`,
      role: 'service',
    });
    const service = bearer((await issueClientToken(auth.ctx, client)).token);
    expect((await ask(service, createUser().getPublicKey())).statusCode).toBe(403);
    expect((await ask({}, createUser().getPublicKey())).statusCode).toBe(401);
    for (const bad of ['', 'not a key', createUser().getPublicKey().replace(/^U/, 'A'), `U${'A'.repeat(55)}`]) {
      const res = await ask(d.headers, bad);
      expect([res.statusCode, res.json().code], bad).toEqual([400, 'VALIDATION_ERROR']);
    }
    // A missing or bad issuer file stops auth at start-up, naming it (not a 500 at a daemon's first request).
    const bad = join(mkdtempSync(join(tmpdir(), 'nats-issuer-')), 'issuer.json');
    writeFileSync(bad, JSON.stringify({ account: 'SA', signer: 'SA' }));
    for (const file of [`${bad}.missing`, bad]) {
      await expect(startAuth(auth.db, testConfig({ nats: { issuer_file: file } }))).rejects.toThrow(
        new RegExp(`cannot read NATS_ISSUER_FILE ${file}`),
      );
    }
    // nats.setup_dir: auth writes the platform's set-up at start-up (kept across restarts) and signs with its keys.
    const setupDir = mkdtempSync(join(tmpdir(), 'nats-setup-'));
    const trustOf = () => JSON.parse(readFileSync(join(setupDir, 'trust.json'), 'utf8'));
    for (const round of [1, 2]) {
      const withSetup = await startAuth(auth.db, testConfig({ nats: { setup_dir: setupDir } }));
      try {
        const res = await ask(d.headers, createUser().getPublicKey(), withSetup.app);
        expect(res.statusCode, `${round}: ${res.body}`).toBe(201);
        const signer = fromSeed(new TextEncoder().encode(trustOf().signer)).getPublicKey();
        expect(decodeJwt(res.json().jwt).iss).toBe(signer);
        expect(readFileSync(join(setupDir, 'server', 'accounts.conf'), 'utf8')).toMatch(/^operator: /);
        expect(readFileSync(join(setupDir, 'creds', 'billing.creds'), 'utf8')).toMatch(/BEGIN NATS USER JWT/);
      } finally {
        await withSetup.close();
      }
    }
    await expect(
      startAuth(auth.db, testConfig({ nats: { setup_dir: setupDir, issuer_file: testEnv.natsTrust } })),
    ).rejects.toThrow(/not both/);
    const without: TestAuth = await startAuth(auth.db, testConfig());
    try {
      const res = await ask(d.headers, createUser().getPublicKey(), without.app);
      expect([res.statusCode, res.json().code]).toEqual([404, 'NATS_USERS_DISABLED']);
    } finally {
      await without.close();
    }
  });
});
