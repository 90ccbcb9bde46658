/**
 * `signup`: a new account, then signed in as `login` signs in (the refresh token saved, never the password), so that
 * a newcomer's first command is not a curl. The password comes from GPU_PASSWORD or standard input (typed twice at a
 * terminal, never echoed); auth mails a code that `gpu email verify` takes.
 */
import { authClient, unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { context, oneOf, showRecord } from '../cli.ts';
import { writeConfig } from '../config.ts';
import { readSecrets } from '../secrets.ts';
import { newPassword } from './account.ts';

const ROLES = ['renter', 'provider'] as const;

export function signupCommands(program: Command) {
  program
    .command('signup')
    .description(
      'create your account and sign in (as gpu login does): the password from GPU_PASSWORD or standard input; ' +
        'then verify your address with the mailed code (gpu email verify)',
    )
    .requiredOption('--email <address>', 'your e-mail address')
    .option('--role <role>', `what you do here (repeatable): ${ROLES.join(', ')}; default renter`, oneOf(ROLES))
    .action(async (opts: { email: string; role?: (typeof ROLES)[number][] }) => {
      const ctx = context(program);
      const auth = authClient({ baseUrl: ctx.url });
      const password = await readSecrets((input) =>
        newPassword(input, { ...ctx.env, GPU_NEW_PASSWORD: ctx.env.GPU_PASSWORD }),
      );
      const made = unwrap(
        await auth.POST('/api/v1/auth/register', {
          body: { email: opts.email, password, ...(opts.role ? { roles: opts.role } : {}) },
        }),
      );
      const pair = unwrap(await auth.POST('/api/v1/auth/login', { body: { email: opts.email, password } }));
      writeConfig(ctx.env, { url: ctx.url, email: opts.email, refresh_token: pair.refresh_token });
      showRecord(ctx.json, made.user, [
        ['id', made.user.id],
        ['email', made.user.email],
        ['roles', made.user.roles.join(', ')],
        ['signed in', `to ${ctx.url}`],
        ['next', 'gpu email verify (the code auth mailed you)'],
      ]);
    });
}
