/**
 * Accounts that recover: a user proves they read mail at their address (verification), and one who forgot their
 * password sets a new one through a link mailed to it (reset).
 *
 * - A mailed token is 256 random bits, stored only as its SHA-256 with the address it was mailed to, used once
 *   (of two requests with the same token exactly one wins), for `recovery.verify_token_ttl` (24 h) or
 *   `reset_token_ttl` (30 min); one for an address the account no longer has does nothing. Every failure is the same
 *   400 INVALID_EMAIL_TOKEN: unknown, used and expired look alike.
 * - Asking for a reset never tells whether the address has an account: the answer is the same 202, given before
 *   anything is looked up (the lookup and the mail happen afterwards, in the background, so the time taken says
 *   nothing either); past `rate_limit.reset_per_account` mails to one address for one client, or
 *   `reset_per_address` for all, nothing more is sent, alike for known and unknown ones. Requests per client address
 *   are limited (429).
 * - Verifying with the account's own sign-in (the mail reader knows the password) verifies and changes nothing else.
 *   Verifying without it takes a new password and starts the account afresh, as a reset does (accounts/epochs.ts):
 *   whoever registered the address before its owner read the mail keeps nothing. Neither: 400
 *   NEW_PASSWORD_REQUIRED, the code still unused.
 * - A reset starts the account afresh (accounts/epochs.ts): every sign-in, trusted device, API key, daemon client and
 *   mailed code of the account ends (whoever held the account before keeps nothing); since the user read the mail,
 *   it also verifies the address. A notice goes to the address after a reset, a fresh start by verification, or a
 *   change of the password.
 */
import { createHash, randomBytes } from 'node:crypto';
import { durationMs, isAppError, type Principal } from '@gpu/common';
import {
  findLiveEmailToken,
  insertEmailToken,
  markEmailVerified,
  retireEmailTokens,
  useEmailToken,
} from '../../db/email-token-repository.ts';
import type { EmailTokenPurpose } from '../../db/schema.ts';
import { findUserByEmail, findUserById, lockUser, type UserRow } from '../../db/user-repository.ts';
import { authErrors } from '../../errors.ts';
import { type FreshStart, startAfresh } from '../accounts/index.ts';
import { audit, auditedChange } from '../audit.ts';
import type { AuthContext } from '../context.ts';
import { normaliseEmail } from '../email.ts';
import { normalisePassword } from '../passwords/index.ts';
import { signedInUser } from '../sign-ins.ts';
import { noticePasswordChanged } from './notices.ts';

const hashEmailToken = (token: string) => createHash('sha256').update(token).digest('hex');

/** Where the mail sends the user: the operator's page with the token, or the token and the command that uses it. */
function instructions(template: string, token: string, command: string): string {
  if (template) return `Open this link:\n\n  ${template.replaceAll('{token}', encodeURIComponent(token))}\n`;
  return `Your code:\n\n  ${token}\n\nUse it with the gpu command line:\n\n  ${command}\n`;
}

/** Makes a token for `user`'s address and mails it. */
async function mailToken(ctx: AuthContext, user: Pick<UserRow, 'id' | 'email'>, purpose: EmailTokenPurpose) {
  const token = randomBytes(32).toString('base64url');
  const { recovery, mail } = ctx.config;
  const ttl = purpose === 'verify_email' ? recovery.verify_token_ttl : recovery.reset_token_ttl;
  await insertEmailToken(ctx.db, {
    user_id: user.id,
    purpose,
    token_hash: hashEmailToken(token),
    email: user.email,
    expires_at: new Date(Date.now() + durationMs(ttl)),
  });
  if (purpose === 'verify_email') {
    ctx.mailer.send({
      to: user.email,
      userId: user.id,
      kind: purpose,
      subject: 'Verify your e-mail address',
      text:
        `Someone, we hope you, made an account of the GPU platform with this address, or asked to verify it.\n\n` +
        instructions(mail.verify_url, token, 'gpu email verify   (it asks for the code)') +
        `\nIt works once, for ${ttl}. Used while signed in to the account, it verifies the address and changes ` +
        'nothing else. Used without signing in, it asks for a new password and makes the account yours alone: ' +
        'every sign-in, API key and machine credential made before ends. If you did not make this account, that ' +
        'is what you want; if you want nothing from the platform, ignore this mail.\n',
    });
  } else {
    ctx.mailer.send({
      to: user.email,
      userId: user.id,
      kind: purpose,
      subject: 'Reset your password',
      text:
        `Someone, we hope you, asked to reset the password of this address's account on the GPU platform.\n\n` +
        instructions(mail.reset_url, token, 'gpu password reset   (it asks for the code and the new password)') +
        `\nIt works once, for ${ttl}, and signs out every device of the account, and ends its API keys and machine ` +
        'credentials. If it was not you, ignore this mail: your password stays as it is.\n',
    });
  }
}

/** Mails a verification link to a user just registered (`recovery.verify_on_register`), after the answer. */
export function verifyNewAccount(ctx: AuthContext, user: UserRow): void {
  if (!ctx.config.recovery.verify_on_register || !ctx.mailer.enabled) return;
  ctx.mailer.later('mailing a verification link', () => mailToken(ctx, user, 'verify_email'));
}

/** The signed-in user asks for a (new) verification link. */
export async function requestVerification(ctx: AuthContext, actor: Principal): Promise<void> {
  const userId = signedInUser(actor, 'their e-mail address');
  const user = await findUserById(ctx.db, userId);
  if (!user) throw authErrors.userGone();
  if (user.email_verified_at) throw authErrors.emailAlreadyVerified();
  if (!ctx.mailer.enabled) throw authErrors.mailNotConfigured();
  await ctx.limiter.consume(ctx.config.rate_limit.verification_per_account, 'verify-mail-account', user.id);
  await mailToken(ctx, user, 'verify_email');
}

/**
 * Verifies the address a token was mailed to; the user, verified. With the account's own sign-in (`caller`, checked
 * live by the service's verifier) nothing else changes; with `newPassword` the account starts afresh with it.
 */
export async function verifyEmail(
  ctx: AuthContext,
  input: { token: string; newPassword?: string },
  caller: Principal | null,
  clientIp: string,
): Promise<UserRow> {
  await ctx.limiter.consume(ctx.config.rate_limit.email_token_per_ip, 'email-token-ip', clientIp);
  const hash = hashEmailToken(input.token);
  const found = await findLiveEmailToken(ctx.db, hash, 'verify_email', new Date());
  if (!found) throw authErrors.invalidEmailToken();
  const signedIn = caller?.kind === 'user' && !caller.scopes && caller.subject === found.user_id;
  if (input.newPassword === undefined && !signedIn) throw authErrors.newPasswordRequired();
  // The policy first (a password equal to the address is refused), so a weak password leaves the code working.
  const passwordHash =
    input.newPassword === undefined ? undefined : await newPasswordHash(ctx, input.newPassword, found);
  const outcome = await auditedChange(ctx, async (trx, record) => {
    // The account first, then its codes: two codes of one account used at once wait for each other, never deadlock.
    const owner = await lockUser(trx, found.user_id);
    const now = new Date();
    const used = await useEmailToken(trx, hash, 'verify_email', now);
    if (!used || !owner || owner.email !== used.email) throw authErrors.invalidEmailToken();
    let done: { user: UserRow } | FreshStart;
    let details: Record<string, unknown>;
    if (passwordHash !== undefined) {
      const fresh = await startAfresh(trx, owner.id, passwordHash, 'address_claimed', now);
      details = {
        fresh_start: true,
        api_keys_revoked: fresh.keysRevoked,
        clients_revoked: fresh.clientsRevoked,
        ssh_keys_removed: fresh.sshKeysRemoved,
      };
      done = fresh;
    } else {
      const verified = await markEmailVerified(trx, owner.id, used.email, now);
      if (!verified) throw authErrors.invalidEmailToken();
      await retireEmailTokens(trx, verified.id, 'verify_email', now);
      details = { fresh_start: false };
      done = { user: verified };
    }
    await record(
      {
        action: 'email_verified',
        actor: { id: done.user.id, kind: 'user', credential: 'mailed_code' },
        target: `user:${done.user.id}`,
        details,
      },
      passwordHash !== undefined
        ? 'e-mail address verified with a new password; everything before ended'
        : 'e-mail address verified',
    );
    return done;
  });
  const { user } = outcome;
  const fresh = 'keysRevoked' in outcome;
  if (fresh) noticePasswordChanged(ctx, user);
  return user;
}

/** The hash of a new password sent with a mailed code, after the registration policy (checked against its address). */
async function newPasswordHash(ctx: AuthContext, password: string, code: { email: string }): Promise<string> {
  ctx.policy.check(password, code.email);
  return ctx.hasher.hash(normalisePassword(password));
}

/** Someone asks for a reset link for `email`: answered alike whether it has an account or not. */
export async function forgotPassword(ctx: AuthContext, email: string, clientIp: string): Promise<void> {
  if (!ctx.mailer.enabled) throw authErrors.mailNotConfigured();
  const limits = ctx.config.rate_limit;
  await ctx.limiter.consume(limits.reset_per_ip, 'reset-ip', clientIp);
  const address = normaliseEmail(email);
  ctx.mailer.later('mailing a reset link', async () => {
    try {
      // Per address and asking client, so that nobody spends another's resets; and per address overall, so that
      // nobody floods a mailbox from many clients.
      await ctx.limiter.consume(limits.reset_per_account, 'reset-account-ip', `${address} ${clientIp}`);
      await ctx.limiter.consume(limits.reset_per_address, 'reset-account', address);
    } catch (err) {
      if (!(isAppError(err) && err.kind === 'rate_limited')) throw err;
      await audit(
        ctx,
        { action: 'password_reset_mail_throttled', outcome: 'refused' },
        'reset mails for one address throttled',
      );
      return;
    }
    const user = await findUserByEmail(ctx.db, address);
    if (user) await mailToken(ctx, user, 'reset_password');
  });
}

/** Sets a new password with a mailed reset token: the account starts afresh (accounts/epochs.ts). */
export async function resetPassword(
  ctx: AuthContext,
  input: { token: string; newPassword: string },
  clientIp: string,
): Promise<void> {
  await ctx.limiter.consume(ctx.config.rate_limit.email_token_per_ip, 'email-token-ip', clientIp);
  const hash = hashEmailToken(input.token);
  // The policy first (it needs the address: a password equal to it is refused), so a weak password leaves the link
  // working for the next try.
  const found = await findLiveEmailToken(ctx.db, hash, 'reset_password', new Date());
  if (!found) throw authErrors.invalidEmailToken();
  const passwordHash = await newPasswordHash(ctx, input.newPassword, found);
  const { user } = await auditedChange(ctx, async (trx, record) => {
    const owner = await lockUser(trx, found.user_id);
    const now = new Date();
    const used = await useEmailToken(trx, hash, 'reset_password', now);
    if (!used || !owner || owner.email !== used.email) throw authErrors.invalidEmailToken();
    // Whoever held the account before (someone who registered the address first, or stole the password) keeps
    // nothing: no sign-in, no API key, no trusted device, no daemon, no SSH key.
    const done = await startAfresh(trx, owner.id, passwordHash, 'password_reset', now);
    await record(
      {
        action: 'password_reset',
        actor: { id: done.user.id, kind: 'user', credential: 'mailed_code' },
        target: `user:${done.user.id}`,
        details: {
          api_keys_revoked: done.keysRevoked,
          clients_revoked: done.clientsRevoked,
          ssh_keys_removed: done.sshKeysRemoved,
        },
      },
      'password reset by mail; every device signed out',
    );
    return done;
  });
  noticePasswordChanged(ctx, user);
}
