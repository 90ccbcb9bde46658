/**
 * The caller `gpu` acts as: an access token in `GPU_TOKEN` (never renewed), else an API key (`GPU_API_KEY`, or the
 * one `gpu login --api-key` saved), else the sign-in `gpu login --email` saved (its refresh token, rotated at each use
 * and saved again), else nobody (a command that needs a token says: gpu login).
 */
import { apiKeyToken, authClient, staticToken, type TokenSource, unwrap } from '@gpu/client';
import { type CliConfig, readConfig, writeConfig } from './config.ts';

/** How long before its expiry a sign-in's access token is renewed. */
const RENEW_EARLY_S = 60;

class NotLoggedIn extends Error {
  constructor() {
    super('not logged in: run gpu login --email <address> (or gpu login --api-key, or set GPU_API_KEY)');
  }
}

/**
 * A token source for the saved sign-in: a refresh at the first use, the rotated refresh token saved at once, and
 * again shortly before the access token expires (a run that lasts, such as `port-forward`). A renewal reads the
 * refresh token from the file, not the one read at the start: another run since (`ssh-proxy` beside a long
 * `port-forward`) has used that one and saved the next, and using a spent one again signs the sign-in out.
 */
function signIn(url: string, env: NodeJS.ProcessEnv, config: CliConfig): TokenSource {
  let held: { token: string; renewAt: number } | undefined;
  let pending: Promise<string> | undefined;
  const refresh = async () => {
    const saved = held ? readConfig(env) : config;
    if (!saved.refresh_token) throw new NotLoggedIn();
    const pair = unwrap(
      await authClient({ baseUrl: url }).POST('/api/v1/auth/refresh', {
        body: { refresh_token: saved.refresh_token },
      }),
    );
    writeConfig(env, { ...saved, refresh_token: pair.refresh_token });
    const early = Math.min(RENEW_EARLY_S, pair.expires_in / 2);
    held = { token: pair.access_token, renewAt: Date.now() + (pair.expires_in - early) * 1000 };
    return pair.access_token;
  };
  return {
    get() {
      if (held && Date.now() < held.renewAt) return Promise.resolve(held.token);
      pending ??= refresh().finally(() => {
        pending = undefined;
      });
      return pending;
    },
  };
}

/**
 * Who a run acts as at `url`. `savedFor`: the platform the saved sign-in is for, when another (its credentials are not
 * in `config`): a command that needs a token says so.
 */
export function tokenSource(url: string, env: NodeJS.ProcessEnv, config: CliConfig, savedFor?: string): TokenSource {
  // An access token a program already holds (a test's, `pnpm wallet`'s sign-in for one command): used as it is.
  if (env.GPU_TOKEN) return staticToken(env.GPU_TOKEN);
  const apiKey = env.GPU_API_KEY || config.api_key;
  if (apiKey) return apiKeyToken({ authUrl: url, apiKey });
  if (config.refresh_token) return signIn(url, env, config);
  return {
    get: () =>
      Promise.reject(
        savedFor
          ? new Error(
              `the saved sign-in is for ${savedFor}, not ${url}: it is never sent elsewhere (gpu login there, or ` +
                'set GPU_API_KEY)',
            )
          : new NotLoggedIn(),
      ),
  };
}
