/** Registration, the caller's account, role management and the initial admin. */
import type { UserRole as Role } from '@gpu/common';
import {
  findUserByEmail,
  findUserById,
  insertUser,
  isUniqueViolation,
  lockAdmins,
  lockInitialAdminCreation,
  type UserRow,
  updateRoles,
} from '../../db/user-repository.ts';
import { authErrors } from '../../errors.ts';
import { auditedChange } from '../audit.ts';
import type { AuthContext } from '../context.ts';
import { normaliseEmail } from '../email.ts';
import { normalisePassword } from '../passwords/index.ts';

/** Roles without duplicates, in a stable order. */
function uniqueRoles(roles: Role[]): Role[] {
  return [...new Set(roles)].sort();
}

/** Roles a user may pick at registration; `admin` is only ever granted by an admin. */
const SELF_ASSIGNABLE_ROLES: readonly Role[] = ['renter', 'provider'];

/** Creates an account: rate-limited, policy-checked, argon2id-hashed; a duplicate email is a 409. */
export async function register(
  ctx: AuthContext,
  input: { email: string; password: string; roles?: Role[] },
  clientIp: string,
): Promise<UserRow> {
  const limits = ctx.config.rate_limit;
  const email = normaliseEmail(input.email);
  await ctx.limiter.consume(limits.register_per_ip, 'register-ip', clientIp);
  await ctx.limiter.consume(limits.register_per_account, 'register-account', email);
  const roles = uniqueRoles(input.roles ?? ['renter']);
  const forbidden = roles.find((r) => !SELF_ASSIGNABLE_ROLES.includes(r));
  if (forbidden) throw authErrors.roleNotSelfAssignable(forbidden);
  ctx.policy.check(input.password, email);
  const passwordHash = await ctx.hasher.hash(normalisePassword(input.password));
  try {
    const user = await insertUser(ctx.db, { email, password_hash: passwordHash, roles });
    ctx.logger.info({ user_id: user.id, roles }, 'user registered');
    return user;
  } catch (err) {
    if (isUniqueViolation(err)) throw authErrors.emailTaken(email);
    throw err;
  }
}

/** The account of a token's subject; USER_GONE when it no longer exists. */
export async function currentUser(ctx: Pick<AuthContext, 'db'>, userId: string): Promise<UserRow> {
  const user = await findUserById(ctx.db, userId);
  if (!user) throw authErrors.userGone();
  return user;
}

/** Replaces a user's roles (admin only, checked by the route). The last admin keeps the admin role. */
export async function setRoles(ctx: AuthContext, actorId: string, userId: string, roles: Role[]): Promise<UserRow> {
  const next = uniqueRoles(roles);
  return auditedChange(ctx, async (trx, record) => {
    const admins = await lockAdmins(trx);
    const user = await findUserById(trx, userId);
    if (!user) throw authErrors.userNotFound(userId);
    if (admins.includes(userId) && !next.includes('admin') && admins.length <= 1) throw authErrors.lastAdmin();
    const row = await updateRoles(trx, userId, next);
    await record(
      {
        action: 'roles_changed',
        actor: { id: actorId, kind: 'user' },
        target: `user:${userId}`,
        details: { roles_before: user.roles, roles_after: next },
      },
      'user roles changed',
    );
    return row!;
  });
}

/**
 * Creates the configured initial admin when no admin exists. Two instances
 * starting at once serialise on an advisory lock. An ADMIN_EMAIL that belongs
 * to an account without the admin role is refused rather than promoted:
 * its password is not the configured one.
 */
export async function ensureInitialAdmin(ctx: AuthContext): Promise<'created' | 'exists' | 'not_configured'> {
  const { admin } = ctx.config;
  if (!admin.email || !admin.password) return 'not_configured';
  const email = normaliseEmail(admin.email);
  ctx.policy.check(admin.password, email);
  const passwordHash = await ctx.hasher.hash(normalisePassword(admin.password));
  const outcome = await ctx.db.transaction().execute(async (trx) => {
    await lockInitialAdminCreation(trx);
    if ((await lockAdmins(trx)).length > 0) return 'exists' as const;
    if (await findUserByEmail(trx, email)) {
      throw new Error(
        `ADMIN_EMAIL ${email} belongs to an existing account without the admin role; ` +
          'choose another email (an existing account is never promoted from configuration)',
      );
    }
    try {
      const user = await insertUser(trx, { email, password_hash: passwordHash, roles: ['admin'] });
      ctx.logger.info({ user_id: user.id, email }, 'initial admin created');
      return 'created' as const;
    } catch (err) {
      if (isUniqueViolation(err)) return 'exists' as const;
      throw err;
    }
  });
  return outcome;
}
