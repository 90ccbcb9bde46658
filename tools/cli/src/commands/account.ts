/**
 * Who you are: `login`, `logout`, `whoami`, your API keys (`keys`), your signed-in devices (`sign-ins`) and your
 * password (`password change|forgot|reset`) and your address (`email send|verify`). Secrets (passwords and mailed
 * codes) come from the environment or standard input, never from the command line.
 */
import { authClient, unwrap } from '@gpu/client';
import { isScope, SCOPE_MEANINGS, SCOPES } from '@gpu/common/scopes';
import type { Command } from 'commander';
import { context, printJson, show, UsageError } from '../cli.ts';
import { type CliConfig, writeConfig } from '../config.ts';
import { everyPage } from '../paging.ts';
import { readSecrets, type SecretInput, secret } from '../secrets.ts';
import { tokenSource } from '../session.ts';

export function accountCommands(program: Command) {
  program
    .command('login')
    .description('sign in and save who you are (an API key, or a refresh token: never your password)')
    .option('--email <address>', 'sign in as this user; the password from GPU_PASSWORD or standard input')
    .option('--api-key', 'use an API key, from GPU_API_KEY or standard input')
    .action(async (opts: { email?: string; apiKey?: boolean }) => {
      const ctx = context(program);
      if (Boolean(opts.email) === Boolean(opts.apiKey)) throw new UsageError('give --email <address> or --api-key');
      const saved = await readSecrets(async (input): Promise<CliConfig> => {
        if (opts.apiKey) {
          const apiKey = await secret(input, ctx.env.GPU_API_KEY, 'API key');
          // The key is tried before it is saved.
          const env = { ...ctx.env, GPU_API_KEY: apiKey };
          await tokenSource(ctx.url, env, {}).get();
          return { url: ctx.url, api_key: apiKey };
        }
        const password = await secret(input, ctx.env.GPU_PASSWORD, 'password');
        const pair = unwrap(
          await authClient({ baseUrl: ctx.url }).POST('/api/v1/auth/login', { body: { email: opts.email!, password } }),
        );
        return { url: ctx.url, email: opts.email!, refresh_token: pair.refresh_token };
      });
      writeConfig(ctx.env, saved);
      process.stdout.write(`logged in to ${ctx.url}${saved.email ? ` as ${saved.email}` : ' with an API key'}\n`);
    });

  program
    .command('logout')
    .description('forget the saved sign-in (its refresh tokens are revoked) or API key')
    .action(async () => {
      const ctx = context(program);
      // Another platform's sign-in is neither sent here to be revoked nor forgotten for this one.
      if (ctx.signedInElsewhere) {
        throw new UsageError(
          `the saved sign-in is for ${ctx.signedInElsewhere}, not ${ctx.url}: nothing forgotten ` +
            `(gpu --url ${ctx.signedInElsewhere} logout)`,
        );
      }
      // Forgotten here whatever happens there: a platform out of reach still gets its refresh token revoked if it can.
      const revoked = ctx.config.refresh_token
        ? await authClient({ baseUrl: ctx.url })
            .POST('/api/v1/auth/logout', { body: { refresh_token: ctx.config.refresh_token } })
            .then((r) => r.response.ok)
            .catch(() => false)
        : true;
      writeConfig(ctx.env, { url: ctx.url });
      process.stdout.write(
        revoked ? 'logged out\n' : 'logged out here (the platform could not be reached to revoke the sign-in)\n',
      );
    });

  program
    .command('whoami')
    .description('who the saved sign-in or key acts as')
    .action(async () => {
      const ctx = context(program);
      const me = unwrap(await ctx.auth.GET('/api/v1/auth/me'));
      show(
        ctx.json,
        me,
        ['id', 'email', 'verified', 'roles'],
        [[me.id, me.email, me.email_verified ? 'yes' : 'no', me.roles.join(', ')]],
      );
    });

  keyCommands(program);
  signInCommands(program);

  const password = program.command('password').description('your password: change it, or reset a forgotten one');
  password
    .command('change')
    .description(
      'change your password (with your sign-in): the current one from GPU_PASSWORD or the first line of standard ' +
        'input, the new one from GPU_NEW_PASSWORD or the next line; every other device is signed out',
    )
    .action(async () => {
      const ctx = context(program);
      const change = await readSecrets(async (input) => ({
        current_password: await secret(input, ctx.env.GPU_PASSWORD, 'current password'),
        new_password: await newPassword(input, ctx.env),
      }));
      unwrap(await ctx.auth.POST('/api/v1/auth/password', { body: change }));
      if (!ctx.json) process.stdout.write('password changed; your other devices are signed out\n');
    });
  recoveryCommands(program, password);
}

/** What a password reset ends (auth starts the account afresh: services/auth README, "Verified addresses and forgotten passwords"). */
const RESET_ENDS = ['sign_ins', 'api_keys', 'daemon_credentials', 'ssh_keys'] as const;

/** A new password: GPU_NEW_PASSWORD, or the next line of standard input (typed twice at a terminal, unseen). */
export async function newPassword(input: SecretInput, env: NodeJS.ProcessEnv): Promise<string> {
  const next = await secret(input, env.GPU_NEW_PASSWORD, 'new password');
  if (!env.GPU_NEW_PASSWORD && process.stdin.isTTY && (await input.line('new password again')) !== next) {
    throw new UsageError('the two new passwords differ');
  }
  return next;
}

/** A code mailed by the platform, from `variable` or standard input (`pnpm mail` shows it under `pnpm start`). */
async function mailedCode(input: SecretInput, value: string | undefined): Promise<string> {
  return secret(input, value, 'the code from the mail');
}

function recoveryCommands(program: Command, password: Command) {
  password
    .command('forgot')
    .description('mail a reset code to your address (the same answer for any address)')
    .requiredOption('--email <address>', 'the address of your account')
    .action(async (opts: { email: string }) => {
      const ctx = context(program);
      const answer = unwrap(
        await authClient({ baseUrl: ctx.url }).POST('/api/v1/auth/password/forgot', { body: { email: opts.email } }),
      );
      if (ctx.json) printJson(answer);
      else process.stdout.write(`${answer.message}; then: gpu password reset\n`);
    });
  password
    .command('reset')
    .description(
      'set a new password with the mailed code: the code from GPU_RESET_CODE or the first line of standard input, ' +
        'the new password from GPU_NEW_PASSWORD or the next line. The account starts afresh: every sign-in ends, ' +
        'every API key and daemon credential is revoked, the SSH keys are removed',
    )
    .action(async () => {
      const ctx = context(program);
      const body = await readSecrets(async (input) => ({
        token: await mailedCode(input, ctx.env.GPU_RESET_CODE),
        new_password: await newPassword(input, ctx.env),
      }));
      // No sign-in: the code is the proof.
      unwrap(await authClient({ baseUrl: ctx.url }).POST('/api/v1/auth/password/reset', { body }));
      if (ctx.json) {
        printJson({ password_reset: true, ended: RESET_ENDS });
        return;
      }
      process.stdout.write(
        'password reset. The account starts afresh: every sign-in ended, your API keys and daemon credentials are ' +
          'revoked (a program that used one needs a new key: gpu keys create), your SSH keys removed (gpu ssh-key ' +
          'add). Next: gpu login --email <address>\n',
      );
    });

  const email = program.command('email').description('your e-mail address: verify it');
  email
    .command('send')
    .description('mail yourself a new verification code (with your sign-in)')
    .action(async () => {
      const ctx = context(program);
      const answer = unwrap(await ctx.auth.POST('/api/v1/auth/email/verification'));
      if (ctx.json) printJson(answer);
      else process.stdout.write(`${answer.message}; then: gpu email verify\n`);
    });
  email
    .command('verify')
    .description(
      'verify your address with the mailed code, from GPU_EMAIL_CODE or the first line of standard input. Signed in ' +
        '(gpu login --email), nothing else changes. Otherwise it sets a new password (GPU_NEW_PASSWORD or the next ' +
        'line) and the account becomes yours alone: every sign-in, API key and daemon credential made before ends',
    )
    .action(async () => {
      const ctx = context(program);
      // The account's own sign-in says the one who reads the mail knows the password (an API key does not).
      const signedIn = Boolean(ctx.config.refresh_token) && !(ctx.env.GPU_API_KEY || ctx.config.api_key);
      const body = await readSecrets(async (input) => {
        const token = await mailedCode(input, ctx.env.GPU_EMAIL_CODE);
        return signedIn ? { token } : { token, new_password: await newPassword(input, ctx.env) };
      });
      const auth = signedIn ? ctx.auth : authClient({ baseUrl: ctx.url });
      const user = unwrap(await auth.POST('/api/v1/auth/email/verify', { body }));
      show(ctx.json, user, ['email', 'verified'], [[user.email, user.email_verified ? 'yes' : 'no']]);
      if (!signedIn && !ctx.json)
        process.stdout.write('your password is set; everything made before ended: gpu login\n');
    });
}

function keyCommands(program: Command) {
  const keys = program.command('keys').description('API keys for your programs (managed with your sign-in)');
  keys
    .command('list')
    .description('your keys (never their secrets)')
    .option('--all', 'revoked ones too')
    .action(async (opts: { all?: boolean }) => {
      const ctx = context(program);
      const list = unwrap(
        await ctx.auth.GET('/api/v1/auth/keys', { params: { query: { include_revoked: opts.all === true } } }),
      );
      show(
        ctx.json,
        list,
        ['id', 'name', 'prefix', 'scopes', 'last used', 'expires', 'revoked'],
        list.map((k) => [k.id, k.name, k.prefix, k.scopes.join(' '), k.last_used_at, k.expires_at, k.revoked_at]),
      );
    });
  keys
    .command('create <name>')
    .description(
      `a new key; its secret is printed this once. Scopes: ${SCOPES.map((s) => `${s} (${SCOPE_MEANINGS[s]})`).join('; ')}`,
    )
    .requiredOption('--scope <scope...>', `what it may do: ${SCOPES.join(', ')}`)
    .option('--expires-at <time>', 'when it stops working (RFC 3339)')
    .action(async (name: string, opts: { scope: string[]; expiresAt?: string }) => {
      const bad = opts.scope.filter((s) => !isScope(s));
      if (bad.length > 0) throw new UsageError(`unknown scope ${bad.join(', ')}: one of ${SCOPES.join(', ')}`);
      const ctx = context(program);
      const created = unwrap(
        await ctx.auth.POST('/api/v1/auth/keys', {
          body: { name, scopes: opts.scope as never, ...(opts.expiresAt ? { expires_at: opts.expiresAt } : {}) },
        }),
      );
      if (ctx.json) show(true, created, [], []);
      else process.stdout.write(`${created.api_key}\n(key ${created.key.id}: shown this once, store it now)\n`);
    });
  keys
    .command('revoke <id>')
    .description('revoke a key at once')
    .action(async (id: string) => {
      const ctx = context(program);
      const revoked = unwrap(await ctx.auth.DELETE('/api/v1/auth/keys/{id}', { params: { path: { id } } }));
      show(ctx.json, revoked, ['id', 'name', 'revoked'], [[revoked.id, revoked.name, revoked.revoked_at]]);
    });
}

function signInCommands(program: Command) {
  const signIns = program.command('sign-ins').description('your signed-in devices (managed with your sign-in)');
  signIns
    .command('list', { isDefault: true })
    .description('your signed-in devices, the oldest first (this one marked)')
    .action(async () => {
      const ctx = context(program);
      const list = await everyPage((cursor) =>
        ctx.auth.GET('/api/v1/auth/sign-ins', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
      );
      show(
        ctx.json,
        list,
        ['id', 'this one', 'signed in', 'last used', 'expires', 'address', 'program'],
        list.map((s) => [
          s.id,
          s.current ? 'yes' : '',
          s.signed_in_at,
          s.last_used_at,
          s.expires_at,
          s.ip,
          s.user_agent,
        ]),
      );
    });
  signIns
    .command('revoke [id]')
    .description('sign a device out at once (its access token works until it expires), or --all other devices')
    .option('--all', 'every device but this one (gpu logout signs this one out)')
    .action(async (id: string | undefined, opts: { all?: boolean }) => {
      if (Boolean(id) === Boolean(opts.all)) throw new UsageError('give a sign-in ID or --all');
      const ctx = context(program);
      if (id) {
        unwrap(await ctx.auth.DELETE('/api/v1/auth/sign-ins/{id}', { params: { path: { id } } }));
        show(ctx.json, { id, signed_out: true }, ['id', 'signed out'], [[id, 'yes']]);
        return;
      }
      const out = unwrap(await ctx.auth.DELETE('/api/v1/auth/sign-ins', { params: { query: {} } }));
      show(ctx.json, out, ['signed out'], [[out.signed_out]]);
    });
}
