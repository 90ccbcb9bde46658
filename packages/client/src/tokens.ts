/**
 * Where a client's bearer token comes from. A source hands out a token that is valid now, renewing it shortly before
 * it expires; `invalidate()` drops a token a service refused (401), so the next request gets a fresh one.
 */
import { readFileSync } from 'node:fs';
import { type Problem, TokenRequestError } from './errors.ts';

export interface TokenSource {
  get(): Promise<string>;
  invalidate?(): void;
}

/** A token the caller already holds (a user's, passed through by the gateway, or one minted in a test). */
export const staticToken = (token: string): TokenSource => ({ get: async () => token });

interface Issued {
  token: string;
  /** When to ask for a new one (ms since the epoch). */
  renewAt: number;
}

/**
 * Renews through `issue` whenever the held token is due; concurrent callers share one request, and a failed request
 * is not cached (the next call tries again).
 */
function renewing(issue: () => Promise<{ token: string; expiresIn: number }>, earlySeconds: number): TokenSource {
  let held: Issued | undefined;
  let pending: Promise<Issued> | undefined;
  return {
    async get() {
      if (held && Date.now() < held.renewAt) return held.token;
      pending ??= issue()
        .then(({ token, expiresIn }) => {
          // Renew `earlySeconds` before expiry, or halfway through a very short lifetime.
          const early = Math.min(earlySeconds, expiresIn / 2);
          held = { token, renewAt: Date.now() + (expiresIn - early) * 1000 };
          return held;
        })
        .finally(() => {
          pending = undefined;
        });
      return (await pending).token;
    },
    invalidate() {
      held = undefined;
    },
  };
}

/** Without a stated lifetime, a token is asked for again after this long (rather than at every request). */
const UNSTATED_LIFETIME_S = 60;

/** The token of a token endpoint's answer, and its lifetime; throws for an answer without one. */
function tokenOf(url: string, body: Record<string, unknown>): { token: string; expiresIn: number } {
  if (typeof body.access_token !== 'string' || !body.access_token) {
    throw new Error(`${url} answered no access_token`);
  }
  const expiresIn = Number(body.expires_in);
  return {
    token: body.access_token,
    expiresIn: Number.isFinite(expiresIn) && expiresIn > 0 ? expiresIn : UNSTATED_LIFETIME_S,
  };
}

async function postJson(fetchFn: typeof fetch, url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetchFn(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
    // A secret or a password is never sent on to wherever a redirect points (fetch would POST the body again).
    redirect: 'error',
  });
  const answer: unknown = await res.json().catch(() => ({}));
  const json = (typeof answer === 'object' && answer !== null ? answer : {}) as Record<string, unknown>;
  if (!res.ok) throw new TokenRequestError(url, res.status, json as Problem);
  return json;
}

export interface ClientCredentialsOptions {
  /** The auth service, e.g. `http://127.0.0.1:8000`. */
  authUrl: string;
  clientId: string;
  clientSecret: string;
  /** Renew this long before expiry (default 30 s). */
  renewEarlySeconds?: number;
  fetch?: typeof fetch;
}

/** A machine client's token (OAuth 2.0 client credentials at the auth service's `POST /api/v1/auth/token`). */
export function clientCredentials(opts: ClientCredentialsOptions): TokenSource {
  const fetchFn = opts.fetch ?? globalThis.fetch;
  const url = `${opts.authUrl.replace(/\/$/, '')}/api/v1/auth/token`;
  return renewing(async () => {
    const body = await postJson(fetchFn, url, {
      grant_type: 'client_credentials',
      client_id: opts.clientId,
      client_secret: opts.clientSecret,
    });
    return tokenOf(url, body);
  }, opts.renewEarlySeconds ?? 30);
}

export interface MachineClientOptions {
  authUrl: string;
  /** The client's ID and secret, or `credentialsFile` (`{"client_id", "client_secret"}`, as auth writes them). */
  clientId?: string;
  clientSecret?: string;
  credentialsFile?: string;
}

/** A machine client's ID and secret, as given or read from its credentials file; throws saying what is missing. */
export function machineCredentials(opts: Omit<MachineClientOptions, 'authUrl'>): {
  clientId: string;
  clientSecret: string;
} {
  if (opts.clientId && opts.clientSecret) return { clientId: opts.clientId, clientSecret: opts.clientSecret };
  if (!opts.credentialsFile) throw new Error('no machine client: client_id and client_secret, or a credentials file');
  let body: { client_id?: string; client_secret?: string };
  try {
    body = JSON.parse(readFileSync(opts.credentialsFile, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read the machine client from ${opts.credentialsFile}: ${(err as Error).message}`);
  }
  if (!body.client_id || !body.client_secret) {
    throw new Error(`${opts.credentialsFile} has no client_id or client_secret`);
  }
  return { clientId: body.client_id, clientSecret: body.client_secret };
}

/**
 * `clientCredentials` made on first use: the credentials file may be written after the caller starts (the auth
 * service writes it when it starts). A failure to read it or get a token is thrown, and tried again next time.
 */
export function lazyClientCredentials(opts: MachineClientOptions): TokenSource {
  let source: TokenSource | undefined;
  return {
    async get() {
      source ??= clientCredentials({ authUrl: opts.authUrl, ...machineCredentials(opts) });
      return source.get();
    },
    invalidate() {
      source?.invalidate?.();
    },
  };
}

export interface UserLoginOptions {
  authUrl: string;
  email: string;
  password: string;
  renewEarlySeconds?: number;
  fetch?: typeof fetch;
}

/**
 * A user's token: logs in once, then renews with the (single-use, rotating) refresh token; logs in again if the
 * refresh token was refused.
 */
export function userLogin(opts: UserLoginOptions): TokenSource {
  const fetchFn = opts.fetch ?? globalThis.fetch;
  const base = `${opts.authUrl.replace(/\/$/, '')}/api/v1/auth`;
  let refreshToken: string | undefined;
  const take = (body: Record<string, unknown>) => {
    refreshToken = String(body.refresh_token);
    return tokenOf(base, body);
  };
  return renewing(async () => {
    if (refreshToken) {
      try {
        return take(await postJson(fetchFn, `${base}/refresh`, { refresh_token: refreshToken }));
      } catch {
        refreshToken = undefined;
      }
    }
    return take(await postJson(fetchFn, `${base}/login`, { email: opts.email, password: opts.password }));
  }, opts.renewEarlySeconds ?? 30);
}

export interface ApiKeyTokenOptions {
  authUrl: string;
  /** A user's API key (`gpk_...`, made at `POST /api/v1/auth/keys`). */
  apiKey: string;
  /** Renew this long before expiry (default 30 s, at most half the token's short life). */
  renewEarlySeconds?: number;
  fetch?: typeof fetch;
}

/**
 * A user's program acting with an API key: the key exchanged at the auth service (`grant_type=api_key`) for a
 * token of its scopes, exchanged again before each expires (two minutes by default).
 */
export function apiKeyToken(opts: ApiKeyTokenOptions): TokenSource {
  const fetchFn = opts.fetch ?? globalThis.fetch;
  const url = `${opts.authUrl.replace(/\/$/, '')}/api/v1/auth/token`;
  return renewing(async () => {
    const body = await postJson(fetchFn, url, { grant_type: 'api_key', api_key: opts.apiKey });
    return tokenOf(url, body);
  }, opts.renewEarlySeconds ?? 30);
}
