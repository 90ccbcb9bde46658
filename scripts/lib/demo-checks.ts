/**
 * What `pnpm demo` (scripts/demo.ts) decides from what it reads, apart from its scenes: whether a data folder is the
 * running platform's, what it says when auth refuses a sign-up for its rate limit, how long it waits for the usage
 * reports of a restarted daemon. Pure functions of what was read, so that each is tested on its own
 * (tests/demo-checks.test.ts).
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { LOOPBACK_REGISTER_PER_IP } from './auth-mode.ts';

/** The public half of each signing key `pnpm start` made in the data folder's `auth/` (one per algorithm). */
function folderSigningKeys(authDir: string): JsonWebKey[] {
  let files: string[];
  try {
    files = readdirSync(authDir).filter((f) => /^jwt-signing-key(-\w+)?\.pem$/.test(f));
  } catch {
    return [];
  }
  return files.flatMap((file) => {
    try {
      return [createPublicKey(readFileSync(path.join(authDir, file), 'utf8')).export({ format: 'jwk' })];
    } catch {
      return [];
    }
  });
}

/** The members of a public JWK that say which key it is (Ed25519 and EC: the curve's points; RSA: n and e). */
const KEY_MEMBERS = ['kty', 'crv', 'x', 'y', 'n', 'e'] as const;

/**
 * Whether the running auth service publishes (its JWKS, `keys`) a key made in this data folder's `auth/`: each folder
 * makes its own at its first start, so only the folder of the platform that answers holds one of them. False where the
 * folder holds none, or the platform publishes none (HS256, or a key of the user's kept elsewhere): the demo then asks
 * otherwise.
 */
export function jwksHoldsFolderKey(authDir: string, keys: readonly Record<string, unknown>[]): boolean {
  const own = folderSigningKeys(authDir);
  return keys.some((published) =>
    own.some((key) => KEY_MEMBERS.every((m) => (key as Record<string, unknown>)[m] === published[m])),
  );
}

/**
 * What the demo says when auth refuses a sign-up with 429: what happened (auth's sign-ups per address, one budget for
 * every sign-up of this machine, since every caller of a local platform is 127.0.0.1, kept in auth's database across
 * restarts), when it can run again (`retryAfter`, auth's Retry-After in seconds), and what lifts the limit.
 */
export function signUpRateLimited(retryAfter: string | null): string {
  const seconds = Number(retryAfter);
  const when =
    Number.isFinite(seconds) && seconds > 0
      ? `auth takes sign-ups from this address again in ${seconds < 120 ? `${Math.ceil(seconds)} s` : `${Math.ceil(seconds / 60)} minutes`}`
      : 'auth takes sign-ups from this address again within the hour';
  return (
    'auth refused the sign-up: 429 RATE_LIMITED. Auth takes a number of sign-ups an hour from one address ' +
    '(rate_limit.register_per_ip, 10 by default), every caller of a platform on this machine is the same address, ' +
    "127.0.0.1, and the count is kept in auth's database across restarts: each demo run signs up four accounts. " +
    `${when}. Or restart pnpm start with a higher limit: on loopback alone (PLATFORM_HOST unset) it sets ` +
    `${LOOPBACK_REGISTER_PER_IP} unless told otherwise, and AUTH__RATE_LIMIT__REGISTER_PER_IP=${LOOPBACK_REGISTER_PER_IP} ` +
    'pnpm start sets it anywhere (docs/demo.md)'
  );
}

/**
 * How long the demo waits, from `killedAt` (ms since the epoch, when it killed the daemon), for a usage report of the
 * restarted daemon. The daemon reports each session's usage at every heartbeat, but billing applies one report per
 * session and minute of the clock (the report's ID names its minute): a restart within the minute of the last report
 * shows only from the next minute on. So: to the next minute after the kill, and a margin for a daemon that restarts
 * slowly on a loaded machine (its start, its first heartbeat, billing's answer), at least two minutes in all.
 */
export function usageResumeTimeoutMs(killedAt: number): number {
  const nextMinute = (Math.floor(killedAt / 60_000) + 1) * 60_000;
  return Math.max(120_000, nextMinute - killedAt + 90_000);
}
