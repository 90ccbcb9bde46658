/** The auth service's named errors; the common error handler turns each into a problem body. */
import { AppError, errors } from '@gpu/common';

export const authErrors = {
  emailTaken: (email: string) => errors.conflict('EMAIL_TAKEN', `an account with the email ${email} already exists`),
  /** One message for an unknown email and a wrong password: login never reveals which. */
  invalidCredentials: () => errors.unauthorized('invalid email or password', 'INVALID_CREDENTIALS'),
  invalidRefreshToken: () => errors.unauthorized('refresh token is invalid', 'INVALID_REFRESH_TOKEN'),
  refreshTokenExpired: () => errors.unauthorized('refresh token has expired', 'REFRESH_TOKEN_EXPIRED'),
  refreshTokenRevoked: () => errors.unauthorized('refresh token has been revoked', 'REFRESH_TOKEN_REVOKED'),
  refreshTokenReused: () =>
    errors.unauthorized(
      'refresh token was already used; every token of its session has been revoked, log in again',
      'REFRESH_TOKEN_REUSED',
    ),
  userGone: () => errors.unauthorized('the account of this token no longer exists', 'USER_NOT_FOUND'),
  userNotFound: (id: string) => errors.notFound('USER_NOT_FOUND', `user ${id} not found`),
  roleNotSelfAssignable: (role: string) =>
    errors.forbidden(`the role ${role} cannot be chosen at registration`, 'ROLE_NOT_SELF_ASSIGNABLE'),
  lastAdmin: () => errors.conflict('LAST_ADMIN', 'the last admin cannot lose the admin role'),
  /** A password policy rule failed; `code` names the rule. */
  weakPassword: (code: string, message: string) =>
    new AppError('invalid', code, message, { errors: [{ path: 'body.password', message }] }),
};
