/**
 * How password guessing is limited without handing strangers a switch that locks an owner out (as Microsoft's smart
 * lockout and OWASP's device cookies do it): failures are counted by account **and source** together, so someone
 * guessing from their own addresses is stopped there, while the owner, elsewhere, logs in as usual.
 *
 * - Every attempt counts against its source (`rate_limit.login_per_ip`: 429 past it, whatever the account).
 * - A client that logged in to the account before presents the `device_token` that login gave it, and is held to a
 *   limit of its own (`login_per_device`): nothing anyone else does locks it out.
 * - Any other client: its failures count against the account from its source (`login_per_account_ip`, 10 in 15
 *   minutes: 429 for that source alone) and against a much higher ceiling for the account from every source
 *   together (`login_per_account`, 100 in 15 minutes), which only guessing from many sources at once reaches, and
 *   which then stops new sources only: the owner's trusted devices, and a reset link, still work.
 * - A source is an IPv4 address, or an IPv6 /64 (what one subscriber gets: counting single IPv6 addresses would give
 *   one attacker 2^64 sources).
 * - Unknown addresses are counted exactly as known ones (a 429 tells nothing). Counters are per account epoch
 *   (account-epochs.ts): once the owner proved the address by mail and set a new password, guesses at the old one
 *   no longer count against them.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { AuthContext } from './context.ts';

/** The source an address counts as: an IPv4 address, or the /64 network of an IPv6 one. */
export function sourceOf(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)?.[1];
  if (mapped && isIPv4(mapped)) return mapped;
  if (!isIPv6(ip)) return ip;
  return `${expandIPv6(ip).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address, without leading zeros (`2001:db8::1` → 2001, db8, 0, ..., 1). */
function expandIPv6(ip: string): string[] {
  const [head = '', tail] = ip.split('%')[0]!.split('::') as [string, string?];
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const middle = tail === undefined ? [] : Array(8 - left.length - right.length).fill('0');
  return [...left, ...middle, ...right].map((g) => g.replace(/^0+(?=.)/, '').toLowerCase());
}

/** The account a login names: its address, and the epoch its counters belong to (0 for an unknown address). */
interface LoginTarget {
  email: string;
  epoch: number;
}

/** The limits one login attempt is held to, checked before the password is, and counted when it is wrong. */
export function loginLimits(ctx: AuthContext, target: LoginTarget, clientIp: string, trustedDevice?: string) {
  const limits = ctx.config.rate_limit;
  const account = `${target.email} #${target.epoch}`;
  const rules: Array<[rule: (typeof limits)['login_per_ip'], name: string, key: string]> = trustedDevice
    ? [[limits.login_per_device, 'login-device', trustedDevice]]
    : [
        [limits.login_per_account_ip, 'login-account-source', `${account} ${sourceOf(clientIp)}`],
        [limits.login_per_account, 'login-account', account],
      ];
  return {
    /** Refuses (429 with Retry-After) an attempt from where failures used their window up. */
    async check(): Promise<void> {
      for (const [rule, name, key] of rules) await ctx.limiter.check(rule, name, key);
    },
    /** Counts a failed attempt. */
    async failed(): Promise<void> {
      for (const [rule, name, key] of rules) await ctx.limiter.hit(rule, name, key);
    },
  };
}

/** Every attempt counts against its source: 429 past `login_per_ip`, whatever the account. */
export async function consumeLoginAttempt(ctx: AuthContext, clientIp: string): Promise<void> {
  await ctx.limiter.consume(ctx.config.rate_limit.login_per_ip, 'login-ip', sourceOf(clientIp));
}
