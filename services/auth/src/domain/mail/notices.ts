/** Mails that tell a user what happened to their account. */
import type { UserRow } from '../../db/user-repository.ts';
import type { AuthContext } from '../context.ts';

/** Tells the address that its account's password changed (a reset, or the user's own change). */
export function noticePasswordChanged(ctx: AuthContext, user: Pick<UserRow, 'id' | 'email'>): void {
  if (!ctx.mailer.enabled) return;
  ctx.mailer.send({
    to: user.email,
    userId: user.id,
    kind: 'password_changed',
    subject: 'Your password was changed',
    text:
      'The password of your GPU platform account was just changed, and every other device was signed out.\n\n' +
      'If it was not you, reset your password at once (gpu password forgot) and tell the platform operator.\n',
  });
}
