/**
 * A browser's way into an HTTP port of a rented workload (a notebook, a dashboard), at an origin of the session's and
 * port's own: `<session>-<port>.ports.<domain>`. One origin per session and port, so that what one workload serves
 * (its provider controls it) can neither read another's pages nor send requests there with the renter's cookies, and
 * never shares an origin with the platform's API.
 *
 * - **A link** (`POST .../port-links`, by the session's renter: their sign-in, or an API key with `connect`): a
 *   one-time ticket in its query, good for `TICKET_TTL_MS`.
 * - **Opening it:** the ticket is taken (once, whoever opens it first) and traded for a cookie on that host alone
 *   (`HttpOnly`, `SameSite=Lax`, `Secure` over HTTPS) for `reach.port_grant_ttl`; the browser is sent on to the same
 *   address without the ticket, so it never stays in its history or a `Referer`.
 * - **Every request** on the host then carries the cookie: it acts as the renter, with the credential the link was made
 *   with, for that session and port only. The session's end ends it, as does that credential's withdrawal (a revoked
 *   key, a sign-out: checked with the auth service at most every `LIVE_CHECK_MS`, and the relay ends its open
 *   streams). Only secrets' SHA-256 are kept.
 * - **A session keeps its newest `MAX_GRANTS_PER_SESSION`** links and browser grants: making one more forgets the
 *   oldest (a link no longer opens; a browser is signed out).
 */
import { createHash, randomBytes } from 'node:crypto';
import { AppError, durationMs, type Principal } from '@gpu/common';
import {
  findCookieGrant,
  insertPortGrant,
  type PortGrantRow,
  purgeExpiredPortGrants,
  takeTicket,
} from '../../db/port-grant-repository.ts';
import type { BillingContext } from '../context.ts';
import { credentialOf, type StreamCredential } from './relay.ts';

/** How long a link may wait to be opened. */
const TICKET_TTL_MS = 60_000;
/**
 * The most links and browser grants a session keeps: a newer one signs the oldest out. Each is a row for as long as it
 * lasts (a cookie: `reach.port_grant_ttl`), and its renter may make links as fast as they like: without a bound, one
 * running session could fill billing's database.
 */
export const MAX_GRANTS_PER_SESSION = 100;
/** How long a credential found live is taken as live without asking again. */
const LIVE_CHECK_MS = 5_000;

/** The query parameter of a link's ticket, and the cookie a browser gets for it. */
export const TICKET_PARAM = 'gpu-port-ticket';
export const GRANT_COOKIE = 'gpu_port_grant';

/** The most cookies of that name a request's grant is looked for among. */
const MAX_GRANT_COOKIES = 4;

/** The address of a session's port on `ports_url`'s domain: `<scheme>://<session>-<port>.ports.<domain>[:<port>]`. */
function portOrigin(portsUrl: string, sessionId: string, port: number): string {
  const url = new URL(portsUrl);
  return `${url.protocol}//${sessionId}-${port}.${url.host}`;
}

const hashOf = (secret: string) => createHash('sha256').update(secret).digest();
const secret = () => randomBytes(32).toString('base64url');

/** 401 PORT_LINK_INVALID: the link was opened already, expired, or is another host's. */
const linkInvalid = () =>
  new AppError(
    'unauthenticated',
    'PORT_LINK_INVALID',
    'this link was opened already, has expired or is not for this address: make a new one (`gpu open <session> <port>`)',
  );

/** 401 PORT_SIGN_IN_REQUIRED: no grant of this host's in the request. */
const signInRequired = () =>
  new AppError(
    'unauthenticated',
    'PORT_SIGN_IN_REQUIRED',
    "open this port with a link of its renter's (`gpu open <session> <port>`): it signs the browser in here",
  );

/** Makes a link to the session's port for its renter (`actor`, checked by the caller); its address and expiry. */
export async function makePortLink(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
  port: number,
  portsUrl: string,
): Promise<{ url: string; expiresAt: Date }> {
  const now = ctx.now();
  const ticket = secret();
  const expiresAt = new Date(now.getTime() + TICKET_TTL_MS);
  await insertPortGrant(
    ctx.db,
    {
      secret_hash: hashOf(ticket),
      kind: 'ticket',
      session_id: sessionId,
      port,
      user_id: actor.subject,
      key_id: actor.keyId ?? null,
      sign_in_id: actor.keyId ? null : (actor.sessionId ?? null),
      expires_at: expiresAt,
      created_at: now,
    },
    MAX_GRANTS_PER_SESSION,
  );
  return { url: `${portOrigin(portsUrl, sessionId, port)}/?${TICKET_PARAM}=${ticket}`, expiresAt };
}

/** The renter a grant acts as: their user, with the credential its link was made with. */
function principalOf(row: PortGrantRow): Principal {
  return {
    subject: row.user_id,
    kind: 'user',
    roles: ['renter'],
    actsFor: row.user_id,
    tokenId: `port-grant:${row.session_id}:${row.port}`,
    ...(row.key_id ? { keyId: row.key_id, scopes: ['connect'] as const } : {}),
    ...(row.sign_in_id ? { sessionId: row.sign_in_id } : {}),
  };
}

/** Rows of expired grants deleted in one statement (a round deletes batches until none is left). */
const GRANT_PURGE_BATCH = 1000;

/** Forgets every expired link and cookie (a background round), a batch at a time; how many went. */
export async function purgeExpiredGrants(ctx: BillingContext): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await purgeExpiredPortGrants(ctx.db, ctx.now(), GRANT_PURGE_BATCH);
    total += n;
    if (n < GRANT_PURGE_BATCH) return total;
  }
}

/** Whether a grant's credential still holds. */
export type CredentialsLive = ((credentials: StreamCredential[]) => Promise<boolean[]>) | null;

/** Browsers' grants: links' tickets traded for cookies, and cookies checked on each request. */
export class PortGrants {
  /** Credentials found live, until when that is taken as so. */
  private readonly liveUntil = new Map<string, number>();

  constructor(
    private readonly ctx: BillingContext,
    private readonly credentialsLive: CredentialsLive,
    private readonly ttl: string,
  ) {}

  /**
   * Trades a link's ticket for a cookie on its host (`host`: the session and port it names): the cookie's secret,
   * expiry and the renter it acts as. 401 PORT_LINK_INVALID for a ticket taken, expired, or another host's.
   */
  async redeem(
    ticket: string,
    host: { sessionId: string; port: number },
  ): Promise<{ cookie: string; expiresAt: Date; actor: Principal }> {
    const now = this.ctx.now();
    const row = await takeTicket(this.ctx.db, hashOf(ticket));
    if (!row || row.expires_at <= now || row.session_id !== host.sessionId || row.port !== host.port) {
      throw linkInvalid();
    }
    await this.assertLive(row);
    const cookie = secret();
    const expiresAt = new Date(now.getTime() + durationMs(this.ttl));
    await insertPortGrant(
      this.ctx.db,
      {
        ...row,
        secret_hash: hashOf(cookie),
        kind: 'cookie',
        expires_at: expiresAt,
        created_at: now,
      },
      MAX_GRANTS_PER_SESSION,
    );
    return { cookie, expiresAt, actor: principalOf(row) };
  }

  /** The renter a request's cookie acts as on its host; 401 PORT_SIGN_IN_REQUIRED without a grant of the host's. */
  async actorOf(cookies: string[], host: { sessionId: string; port: number }): Promise<Principal> {
    // The first of them that is a grant of this host: a cookie of the same name that another host's page set for the
    // whole domain (a workload's script may) is passed over, not taken for the renter's.
    for (const cookie of cookies.slice(0, MAX_GRANT_COOKIES)) {
      const row = await findCookieGrant(this.ctx.db, hashOf(cookie), this.ctx.now());
      if (!row || row.session_id !== host.sessionId || row.port !== host.port) continue;
      await this.assertLive(row);
      return principalOf(row);
    }
    throw signInRequired();
  }

  /** 401 PORT_SIGN_IN_REQUIRED once the grant's credential was withdrawn (an auth service that cannot be asked: held). */
  private async assertLive(row: PortGrantRow): Promise<void> {
    if (!this.credentialsLive) return;
    const key = `${row.user_id}/${row.key_id ?? ''}/${row.sign_in_id ?? ''}`;
    const now = Date.now();
    if ((this.liveUntil.get(key) ?? 0) > now) return;
    let live: boolean | undefined;
    try {
      [live] = await this.credentialsLive([credentialOf(principalOf(row))]);
    } catch (err) {
      this.ctx.logger.warn({ err }, "reach: checking a port grant's credential failed; it holds meanwhile");
      return;
    }
    if (live === false) {
      this.liveUntil.delete(key);
      throw signInRequired();
    }
    if (this.liveUntil.size > 10_000) this.liveUntil.clear();
    this.liveUntil.set(key, now + LIVE_CHECK_MS);
  }
}
