/**
 * The daemon's own NATS user, for a platform whose NATS server runs in operator mode: the daemon makes an nkey user
 * pair (its seed never leaves the process), asks auth for a user JWT for its public key (`POST /auth/nats-users`, with
 * its token) and connects with both. The user may publish only on subjects naming the daemon's owner and its client
 * (`<heartbeats>.<owner>.<client>.<provider>`, `<usage>.<owner>.<client>.<session>`), take the answers on its own inbox
 * prefix (`_INBOX.<client>`) and hear billing's nudges to its owner's machines; the NATS server enforces that, so the
 * registry and billing know the sender from the subject and no token travels with a message.
 *
 * The JWT lives `nats.user_ttl` (auth's, 15 minutes); the daemon asks for the next one at two thirds of its life,
 * then again every RETRY_MS while auth does not answer. The connection takes the newest JWT at each (re)connection:
 * when the server drops the connection at the old one's expiry, the client reconnects at once with the new one
 * (publishes meanwhile wait in the client's buffer; a heartbeat request then fails over to HTTP). A revoked client gets
 * no new JWT (401 CLIENT_REVOKED, logged as an error) and its connection stops at the expiry.
 *
 * A platform that issues no NATS users answers 404 NATS_USERS_DISABLED (an auth older than the route, 404 too): the
 * daemon then connects as before
 * (`nats_credentials`, or none) and sends its token with each message.
 */
import { ApiError, authClient, type TokenSource, unwrap } from '@gpu/client';
import { daemonInboxPrefix, type Logger } from '@gpu/common';
import { createUser } from '@nats-io/nkeys';
import { type Authenticator, jwtAuthenticator } from '@nats-io/transport-node';

/** How long the daemon waits before asking again when auth could not be reached. */
const RETRY_MS = 10_000;
/** The share of a user's life after which the next one is asked for. */
const RENEW_AT = 2 / 3;
/** The least wait before asking again (a clock far off must not make the daemon ask in a tight loop). */
const MIN_RENEW_MS = 1_000;
/**
 * The longest wait before a renewal: a day, and within setTimeout's range (past 2^31-1 ms it fires at once: an expiry
 * 60 days ahead, a clock far behind, asked auth in a loop).
 */
const MAX_RENEW_MS = 24 * 60 * 60_000;

/** Whom the user's subjects name, and how a connection authenticates as it. */
export interface NatsIdentity {
  owner: string;
  client: string;
  /** The newest JWT and the daemon's seed, read at each (re)connection. */
  authenticator: Authenticator;
  /** `_INBOX.<client>`: the only inboxes the user may subscribe to. */
  inboxPrefix: string;
  /** Stops renewing (at the daemon's stop). */
  stop(): void;
}

interface IssuedUser {
  jwt: string;
  owner_id: string;
  client_id: string;
  expires_at: string;
}

/**
 * The daemon's NATS identity from auth, renewed until `stop()`; undefined when the platform issues no NATS users.
 * Waits (retrying every RETRY_MS, with a warning) while auth cannot be reached, since nothing works without it;
 * throws when auth refuses the client (revoked, not a daemon's).
 */
export async function issuedNatsIdentity(opts: {
  authUrl: string;
  token: TokenSource;
  timeoutMs: number;
  logger: Logger;
}): Promise<NatsIdentity | undefined> {
  const auth = authClient({ baseUrl: opts.authUrl, token: opts.token, timeoutMs: opts.timeoutMs });
  const key = createUser();
  const ask = async (): Promise<IssuedUser> =>
    unwrap(await auth.POST('/api/v1/auth/nats-users', { body: { public_key: key.getPublicKey() } }));
  let user: IssuedUser;
  for (;;) {
    try {
      user = await ask();
      break;
    } catch (err) {
      // NATS_USERS_DISABLED, or an auth from before the route (ROUTE_NOT_FOUND): no NATS users here.
      if (err instanceof ApiError && err.status === 404) {
        opts.logger.info('the platform issues no NATS users: connecting to NATS as configured, tokens on messages');
        return undefined;
      }
      if (err instanceof ApiError && err.status < 500 && err.status !== 429) {
        throw new Error(`auth refused this daemon a NATS user: ${err.message}`, { cause: err });
      }
      opts.logger.warn({ err: (err as Error).message, retry_in_ms: RETRY_MS }, 'cannot get a NATS user yet, retrying');
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const renewIn = (ms: number) => {
    if (stopped) return;
    // An expiry that is no date (NaN) is renewed after the retry wait, not at once.
    const wait = Number.isFinite(ms) ? Math.min(MAX_RENEW_MS, Math.max(MIN_RENEW_MS, ms)) : RETRY_MS;
    timer = setTimeout(renew, wait);
    timer.unref();
  };
  const renew = async () => {
    try {
      user = await ask();
      opts.logger.debug({ expires_at: user.expires_at }, 'NATS user renewed');
      renewIn((Date.parse(user.expires_at) - Date.now()) * RENEW_AT);
    } catch (err) {
      // Refused (the client revoked, its secret rotated away, its owner no longer a provider): asking again is no use.
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
        opts.logger.error(
          { err: err.message, expires_at: user.expires_at },
          'auth no longer issues this daemon a NATS user: NATS stops at its expiry',
        );
        return;
      }
      opts.logger.warn({ err: (err as Error).message, retry_in_ms: RETRY_MS }, 'renewing the NATS user failed');
      renewIn(RETRY_MS);
    }
  };
  renewIn((Date.parse(user.expires_at) - Date.now()) * RENEW_AT);
  const seed = key.getSeed();
  opts.logger.info({ owner_id: user.owner_id, client_id: user.client_id }, 'NATS user issued by auth');
  return {
    owner: user.owner_id,
    client: user.client_id,
    authenticator: jwtAuthenticator(
      () => user.jwt,
      () => seed,
    ),
    inboxPrefix: daemonInboxPrefix(user.client_id),
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
