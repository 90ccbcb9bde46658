/**
 * A session's port links and browser grants are bounded (domain/reach/port-grants.ts): its renter may make links as
 * fast as they like, but the session keeps its newest `MAX_GRANTS_PER_SESSION` of them, links and signed-in browsers
 * together; a newer one forgets the oldest (the link no longer opens, the browser is signed out), and no other
 * session's.
 */
import { randomUUID } from 'node:crypto';
import type { Principal } from '@gpu/common';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { MAX_GRANTS_PER_SESSION, makePortLink, PortGrants } from '../src/domain/reach/index.ts';
import { useBillingHarness } from './support/setup.ts';

// A clock a millisecond on at each reading: the links in a row are each newer than the one before.
let tick = Date.now();
const h = useBillingHarness({ now: () => new Date(++tick) });

const PORT = 8888;
const PORTS_URL = 'https://ports.example.test';

const renter = (): Principal => ({
  subject: randomUUID(),
  kind: 'user',
  roles: ['renter'],
  actsFor: undefined,
  tokenId: 't',
  sessionId: randomUUID(),
});

const ticketOf = (url: string) => new URL(url).searchParams.get('gpu-port-ticket')!;

async function grantsOf(sessionId: string): Promise<number> {
  const row = await h.db
    .selectFrom('port_grants')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('session_id', '=', sessionId)
    .executeTakeFirst();
  return Number(row?.n);
}

describe("a session's port links and browsers", () => {
  it('keeps the newest of them: one more link forgets the oldest link, and the oldest signed-in browser', async () => {
    const actor = renter();
    const [session, other] = [randomUUID(), randomUUID()];
    const grants = new PortGrants(h.ctx, null, '8h');
    const host = { sessionId: session, port: PORT };
    const link = () => makePortLink(h.ctx, actor, session, PORT, PORTS_URL);
    await makePortLink(h.ctx, actor, other, PORT, PORTS_URL);

    // The first browser signs in; then links up to the bound, the oldest of them never opened.
    const first = await grants.redeem(ticketOf((await link()).url), host);
    const unopened = await link();
    for (let i = 2; i < MAX_GRANTS_PER_SESSION; i++) await link();
    expect(await grantsOf(session)).toBe(MAX_GRANTS_PER_SESSION);
    expect((await grants.actorOf([first.cookie], host)).subject).toBe(actor.subject);

    // One more: the first browser is signed out.
    const newest = await link();
    expect(await grantsOf(session)).toBe(MAX_GRANTS_PER_SESSION);
    await expect(grants.actorOf([first.cookie], host)).rejects.toMatchObject({ code: 'PORT_SIGN_IN_REQUIRED' });
    // And one more: the oldest link no longer opens; the newest does.
    await link();
    await expect(grants.redeem(ticketOf(unopened.url), host)).rejects.toMatchObject({ code: 'PORT_LINK_INVALID' });
    const browser = await grants.redeem(ticketOf(newest.url), host);
    expect((await grants.actorOf([browser.cookie], host)).subject).toBe(actor.subject);
    expect(await grantsOf(session)).toBe(MAX_GRANTS_PER_SESSION);
    // Another session's link is not one of them.
    expect(await grantsOf(other)).toBe(1);
  });

  it('forgets expired ones first: links long expired, however many and however new, sign no browser out', async () => {
    const actor = renter();
    const session = randomUUID();
    const grants = new PortGrants(h.ctx, null, '8h');
    const host = { sessionId: session, port: PORT };
    const browser = await grants.redeem(
      ticketOf((await makePortLink(h.ctx, actor, session, PORT, PORTS_URL)).url),
      host,
    );
    // More expired links than the bound, made after the browser signed in (the background purge has not run yet).
    await sql`INSERT INTO port_grants (secret_hash, kind, session_id, port, user_id, expires_at, created_at)
      SELECT sha256(convert_to(gen_random_uuid()::text, 'UTF8')), 'ticket', ${session}, ${PORT}, ${actor.subject},
             now() - interval '1 hour', now() + interval '1 hour'
      FROM generate_series(1, ${MAX_GRANTS_PER_SESSION + 50})`.execute(h.db);
    await makePortLink(h.ctx, actor, session, PORT, PORTS_URL);
    expect((await grants.actorOf([browser.cookie], host)).subject).toBe(actor.subject);
    expect(await grantsOf(session)).toBe(MAX_GRANTS_PER_SESSION);
  });
});
