/**
 * The audit trail: security-relevant actions are appended with who, what, when, from where and in which request, and
 * the outcome; admins read them with filters and keyset paging; the database itself refuses to update or delete an
 * event (but the retention purge's deletion of old ones).
 */

import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { appendAudit, purgeAudit, setAuditRetention } from '@gpu/common';
import { lockWaiters } from '@gpu/common/testing';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { ensureBootstrapClients } from '../src/domain/clients.ts';
import { bearer, registerAndLogin, startAuth, testConfig, useAuth } from './helpers.ts';

const ADMIN = { email: 'auditor@example.com', password: 'initial admin passphrase' };
const auth = useAuth(testConfig({ admin: ADMIN }));
let admin: Record<string, string>;

beforeAll(async () => {
  await ensureInitialAdmin(auth.ctx);
  const res = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
  admin = bearer(res.json().access_token);
});

interface AuditEvent {
  id: string;
  action: string;
  outcome: string;
  actor_id: string | null;
  actor_credential: string | null;
  address: string | null;
  target: string | null;
  details: Record<string, unknown>;
  request_id: string | null;
}

const trail = async (query: string, headers = admin) => {
  const res = await auth.app.inject({ url: `/api/v1/auth/audit?${query}`, headers });
  return { status: res.statusCode, events: res.json() as AuditEvent[], next: res.headers['x-next-cursor'] as string };
};

describe('the audit trail', () => {
  it('records who made and revoked a key, changed roles, and what was refused, from where, in which request', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const created = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: { ...bearer(tokens.access_token), 'x-request-id': 'req-audit-1' },
      remoteAddress: '198.51.100.7',
      payload: { name: 'ci', scopes: ['offers'] },
    });
    expect(created.statusCode).toBe(201);
    const keyId = created.json().key.id as string;
    await auth.app.inject({
      method: 'DELETE',
      url: `/api/v1/auth/keys/${keyId}`,
      headers: bearer(tokens.access_token),
    });
    await auth.app.inject({
      method: 'PUT',
      url: `/api/v1/auth/users/${user.id}/roles`,
      headers: admin,
      payload: { roles: ['renter', 'provider'] },
    });
    await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/token',
      remoteAddress: '203.0.113.9',
      payload: { grant_type: 'api_key', api_key: `gpk_${keyId.replaceAll('-', '')}${'A'.repeat(43)}` },
    });

    const mine = await trail(`actor_id=${user.id}`);
    expect(mine.events.map((e) => e.action)).toEqual(['api_key_created', 'api_key_revoked']);
    expect(mine.events[0]).toMatchObject({
      outcome: 'succeeded',
      target: `api_key:${keyId}`,
      address: '198.51.100.7',
      request_id: 'req-audit-1',
      details: { scopes: ['offers'], name: 'ci' },
    });
    const roles = await trail(`action=roles_changed&target=user:${user.id}`);
    expect(roles.events).toHaveLength(1);
    expect(roles.events[0]!.details).toEqual({ roles_before: ['renter'], roles_after: ['provider', 'renter'] });
    const refused = await trail(`outcome=refused&target=api_key:${keyId}`);
    expect(refused.events).toMatchObject([
      { action: 'api_key_refused', actor_id: null, address: '203.0.113.9', details: { reason: 'wrong secret' } },
    ]);
  });

  it('pages by keyset, oldest first, and is for admins only', async () => {
    const first = await trail('limit=1');
    expect(first.events).toHaveLength(1);
    const second = await trail(`limit=1&cursor=${first.next}`);
    expect(second.events[0]!.id).not.toBe(first.events[0]!.id);
    const { tokens } = await registerAndLogin(auth.app);
    expect((await trail('', bearer(tokens.access_token))).status).toBe(403);
    expect((await trail('from=yesterday')).status).toBe(400);
  });

  it('is refused any update or deletion by the database itself, but the retention purge of old events', async () => {
    const [event] = (await trail('limit=1')).events;
    for (const statement of [
      sql`UPDATE audit_events SET action = 'nothing' WHERE id = ${event!.id}`,
      sql`DELETE FROM audit_events WHERE id = ${event!.id}`,
      sql`TRUNCATE audit_events`,
    ]) {
      await expect(statement.execute(auth.db)).rejects.toMatchObject({ code: '42501' });
    }
    // The switch the old guard honoured (any session could set it) opens nothing.
    await expect(
      auth.db.transaction().execute(async (trx) => {
        await sql`SELECT set_config('audit.purge', 'on', true)`.execute(trx);
        await sql`DELETE FROM audit_events WHERE id = ${event!.id}`.execute(trx);
      }),
    ).rejects.toMatchObject({ code: '42501' });
    // Past the retention the database holds (its clock, fixed in the transaction), from the start of the chain.
    await appendAudit(auth.db, { action: 'recent' });
    const purged = await auth.db.transaction().execute(async (trx) => {
      await sql`
        UPDATE audit_chain SET retention = now() - e.at FROM audit_events e
          WHERE e.seq = (SELECT max(seq) FROM audit_events)`.execute(trx);
      return purgeAudit(trx);
    });
    expect(purged).toBeGreaterThan(0);
    expect((await trail(`action=${event!.action}`)).events.map((e) => e.id)).not.toContain(event!.id);
    expect((await trail('action=recent')).events).toHaveLength(1);
    await setAuditRetention(auth.db, 0);
  });
});

describe('a change and its event', () => {
  /** Runs `body` while the trail refuses events of `action` (a full disk, a lost connection: any failed append). */
  async function refusing<T>(action: string, body: () => Promise<T>): Promise<T> {
    await sql`ALTER TABLE audit_events ADD CONSTRAINT zz_refused CHECK (action <> ${sql.lit(action)}) NOT VALID`.execute(
      auth.db,
    );
    try {
      return await body();
    } finally {
      await sql`ALTER TABLE audit_events DROP CONSTRAINT zz_refused`.execute(auth.db);
    }
  }

  it('commit together: a change whose event cannot be appended is not made', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const created = await refusing('api_key_created', () =>
      auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/keys',
        headers: bearer(tokens.access_token),
        payload: { name: 'unrecorded', scopes: ['offers'] },
      }),
    );
    expect(created.statusCode).toBeGreaterThanOrEqual(500);
    const keys = await auth.app.inject({ url: '/api/v1/auth/keys', headers: bearer(tokens.access_token) });
    expect(keys.json()).toEqual([]);
    const roles = await refusing('roles_changed', () =>
      auth.app.inject({
        method: 'PUT',
        url: `/api/v1/auth/users/${user.id}/roles`,
        headers: admin,
        payload: { roles: ['renter', 'provider'] },
      }),
    );
    expect(roles.statusCode).toBeGreaterThanOrEqual(500);
    const after = await auth.db.selectFrom('users').select('roles').where('id', '=', user.id).executeTakeFirstOrThrow();
    expect(after.roles).toEqual(user.roles);
    expect((await trail(`actor_id=${user.id}`)).events).toEqual([]);
    expect((await trail(`action=roles_changed&target=user:${user.id}`)).events).toEqual([]);
  });

  it('but for a revocation: it stands though its event cannot be appended', async () => {
    const { tokens } = await registerAndLogin(auth.app);
    const created = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: bearer(tokens.access_token),
      payload: { name: 'leaked', scopes: ['offers'] },
    });
    const { key, api_key: secret } = created.json();
    const revoked = await refusing('api_key_revoked', () =>
      auth.app.inject({ method: 'DELETE', url: `/api/v1/auth/keys/${key.id}`, headers: bearer(tokens.access_token) }),
    );
    expect(revoked.statusCode, revoked.body).toBe(200);
    expect(revoked.json().revoked_at).not.toBeNull();
    const grant = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams({ grant_type: 'api_key', api_key: secret }).toString(),
    });
    expect(grant.json().code).toBe('API_KEY_REVOKED');
    expect(auth.logs.lines().some((l) => l.msg === 'appending to the audit trail failed: the revocation stands')).toBe(
      true,
    );

    // A stolen refresh token presented again ends its sign-in, whatever the trail says.
    const strict = await startAuth(auth.db, testConfig({ admin: ADMIN, jwt: { refresh_reuse_interval: '0s' } }));
    try {
      const victim = await registerAndLogin(strict.app);
      const refresh = (token: string) =>
        strict.app.inject({ method: 'POST', url: '/api/v1/auth/refresh', payload: { refresh_token: token } });
      const thiefs = (await refresh(victim.tokens.refresh_token)).json().refresh_token as string;
      const reused = await refusing('refresh_token_reused', () => refresh(victim.tokens.refresh_token));
      expect(reused.json().code).toBe('REFRESH_TOKEN_REUSED');
      expect((await refresh(thiefs)).statusCode).toBe(401);
    } finally {
      await strict.close();
    }
  });

  it('are one for a change made once, however many ask for it at once', async () => {
    const { tokens } = await registerAndLogin(auth.app);
    const created = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: bearer(tokens.access_token),
      payload: { name: 'revoked-at-once', scopes: ['offers'] },
    });
    const keyId = created.json().key.id as string;
    // The key's row held while five revocations read it and wait to write it: they race as closely as they can.
    const revokes = await auth.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM api_keys WHERE id = ${keyId} FOR UPDATE`.execute(trx);
      const racing = Promise.all(
        Array.from({ length: 5 }, () =>
          auth.app.inject({
            method: 'DELETE',
            url: `/api/v1/auth/keys/${keyId}`,
            headers: bearer(tokens.access_token),
          }),
        ),
      );
      await lockWaiters(auth.db, 5);
      return { racing };
    });
    const answers = await revokes.racing;
    expect(answers.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(new Set(answers.map((r) => r.json().revoked_at)).size).toBe(1);
    expect((await trail(`action=api_key_revoked&target=api_key:${keyId}`)).events).toHaveLength(1);
  });

  it("leave no platform client's secret file behind an event that could not be appended", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'audit-bootstrap-'));
    const boot = await startAuth(
      auth.db,
      testConfig({ clients: { bootstrap: 'audited-svc:service', secrets_dir: dir } }),
    );
    try {
      await refusing('client_bootstrapped', async () => {
        await expect(ensureBootstrapClients(boot.ctx)).rejects.toMatchObject({ code: '23514' });
      });
      expect(existsSync(path.join(dir, 'audited-svc.json'))).toBe(false);
      const clients = await auth.db.selectFrom('clients').select('id').where('name', '=', 'audited-svc').execute();
      expect(clients).toEqual([]);
      // Once the trail takes it again, the next start makes the client, its file and its event.
      expect(await ensureBootstrapClients(boot.ctx)).toEqual([path.join(dir, 'audited-svc.json')]);
      expect((await trail('action=client_bootstrapped')).events).toHaveLength(1);
    } finally {
      await boot.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('records a logout and a spent refresh token presented again', async () => {
    const strict = await startAuth(auth.db, testConfig({ admin: ADMIN, jwt: { refresh_reuse_interval: '0s' } }));
    try {
      const { user, tokens } = await registerAndLogin(strict.app);
      const refresh = (token: string) =>
        strict.app.inject({
          method: 'POST',
          url: '/api/v1/auth/refresh',
          payload: { refresh_token: token },
          remoteAddress: '203.0.113.44',
        });
      const next = await refresh(tokens.refresh_token);
      expect(next.statusCode).toBe(200);
      const reused = await refresh(tokens.refresh_token);
      expect(reused.json().code).toBe('REFRESH_TOKEN_REUSED');
      const again = await registerAndLogin(strict.app, { email: `again-${user.email}` });
      const out = await strict.app.inject({
        method: 'POST',
        url: '/api/v1/auth/logout',
        payload: { refresh_token: again.tokens.refresh_token },
      });
      expect(out.statusCode).toBeLessThan(300);
      expect((await trail(`action=refresh_token_reused&actor_id=${user.id}`)).events).toMatchObject([
        { outcome: 'refused', address: '203.0.113.44' },
      ]);
      expect((await trail(`action=logged_out&actor_id=${again.user.id}`)).events).toHaveLength(1);
    } finally {
      await strict.close();
    }
  });
});
