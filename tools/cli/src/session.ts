/**
 * The caller `gpu` acts as: an API key (`GPU_API_KEY`, or the one `gpu login --api-key` saved), else the sign-in
 * `gpu login --email` saved (its refresh token, rotated at each use and saved again), else nobody (a command that
 * needs a token says: gpu login).
 */
import { apiKeyToken, authClient, type TokenSource, unwrap } from '@gpu/client';
import { type CliConfig, writeConfig } from './config.ts';

class NotLoggedIn extends Error {
  constructor() {
    super('not logged in: run gpu login --email <address> (or gpu login --api-key, or set GPU_API_KEY)');
  }
}

/** A token source for the saved sign-in: one refresh per run, the rotated refresh token saved at once. */
function signIn(url: string, env: NodeJS.ProcessEnv, config: CliConfig): TokenSource {
  let token: Promise<string> | undefined;
  return {
    get() {
      token ??= (async () => {
        const pair = unwrap(
          await authClient({ baseUrl: url }).POST('/api/v1/auth/refresh', {
            body: { refresh_token: config.refresh_token ?? '' },
          }),
        );
        writeConfig(env, { ...config, refresh_token: pair.refresh_token });
        return pair.access_token;
      })();
      return token;
    },
  };
}

export function tokenSource(url: string, env: NodeJS.ProcessEnv, config: CliConfig): TokenSource {
  const apiKey = env.GPU_API_KEY || config.api_key;
  if (apiKey) return apiKeyToken({ authUrl: url, apiKey });
  if (config.refresh_token) return signIn(url, env, config);
  return {
    get: () => Promise.reject(new NotLoggedIn()),
  };
}
