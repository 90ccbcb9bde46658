/** The auth service's named errors; the common error handler turns each into a problem body. */
import { AppError, errors } from '@gpu/common';

/** Why an SSH public key is refused (400). */
export type SshKeyRefusal = 'INVALID_SSH_KEY' | 'SSH_KEY_IS_PRIVATE' | 'SSH_KEY_TYPE_NOT_ALLOWED' | 'SSH_KEY_TOO_SHORT';

/** Why a key whose secret matched no longer works (`apiKeyRefused`). */
const API_KEY_REFUSALS = {
  revoked: {
    code: 'API_KEY_REVOKED',
    detail: 'this API key was revoked: make a new key, signed in (POST /api/v1/auth/keys)',
  },
  expired: {
    code: 'API_KEY_EXPIRED',
    detail: 'this API key has expired: make a new key, signed in (POST /api/v1/auth/keys)',
  },
  'no role': {
    code: 'API_KEY_NO_ROLE',
    detail: "this API key's user holds no role a key carries (admin acts through its own sign-in only)",
  },
} as const;

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
  /** A user's token whose sign-in this service sees ended (accounts/epochs.ts). */
  signInEnded: () =>
    errors.unauthorized(
      'this sign-in has ended (signed out, the password changed or reset, or the address proven by its owner): log in again',
      'SIGN_IN_ENDED',
    ),
  /** An API key's token whose key was revoked (or ended with its account's epoch). */
  revokedKeyToken: () =>
    errors.unauthorized('the API key of this token was revoked: make a new key, signed in', 'API_KEY_REVOKED'),
  userGone: () => errors.unauthorized('the account of this token no longer exists', 'USER_NOT_FOUND'),
  userNotFound: (id: string) => errors.notFound('USER_NOT_FOUND', `user ${id} not found`),
  roleNotSelfAssignable: (role: string) =>
    errors.forbidden(`the role ${role} cannot be chosen at registration`, 'ROLE_NOT_SELF_ASSIGNABLE'),
  lastAdmin: () => errors.conflict('LAST_ADMIN', 'the last admin cannot lose the admin role'),
  /** A password policy rule failed; `code` names the rule. */
  weakPassword: (code: string, message: string) =>
    new AppError('invalid', code, message, { errors: [{ path: 'body.password', message }] }),
  clientNotFound: (id: string) => errors.notFound('CLIENT_NOT_FOUND', `client ${id} not found`),
  clientNameTaken: (name: string, ownerId: string | null) =>
    errors.conflict(
      'CLIENT_NAME_TAKEN',
      ownerId === null
        ? `an active platform client is already named ${name}`
        : `user ${ownerId} already has an active client named ${name}`,
    ),
  notYourClient: () =>
    errors.forbidden('providers manage only the daemon clients that act for themselves', 'NOT_CLIENT_OWNER'),
  ownerNotProvider: (id: string) =>
    errors.conflict('OWNER_NOT_PROVIDER', `user ${id} does not hold the provider role a daemon acts for`),
  ownerRequired: () =>
    errors.validation('a daemon client names the provider owner it acts for', [
      { path: 'body.owner_id', message: 'required for role daemon' },
    ]),
  ownerOnlyForDaemons: () =>
    errors.validation('only a daemon client acts for an owner', [
      { path: 'body.owner_id', message: 'only for role daemon' },
    ]),
  clientRevoked: (id: string) => errors.conflict('CLIENT_REVOKED', `client ${id} is revoked`),
  /** One answer for a mailed token that is unknown, used, expired or for an address the account no longer has. */
  invalidEmailToken: () =>
    new AppError('invalid', 'INVALID_EMAIL_TOKEN', 'this link is unknown, already used or expired: ask for a new one', {
      errors: [{ path: 'body.token', message: 'unknown, used or expired' }],
    }),
  /** A verification without the account's sign-in takes the password the account has from then on. */
  newPasswordRequired: () =>
    new AppError(
      'invalid',
      'NEW_PASSWORD_REQUIRED',
      "verifying without the account's own sign-in sets its password: send new_password (or verify signed in)",
      { errors: [{ path: 'body.new_password', message: "required without the account's own sign-in" }] },
    ),
  emailAlreadyVerified: () => errors.conflict('EMAIL_ALREADY_VERIFIED', 'your e-mail address is already verified'),
  mailNotConfigured: () =>
    new AppError('unavailable', 'MAIL_UNAVAILABLE', 'this platform sends no mail (its operator set no SMTP server)'),
  notAUser: () => errors.forbidden('this endpoint is for users; a machine client has no account', 'NOT_A_USER'),
  /** RFC 6749 §5.2 errors of the token endpoint carry `error` (and a problem body like every error). */
  invalidClient: () =>
    new AppError('unauthenticated', 'INVALID_CLIENT', 'client authentication failed', {
      extra: { error: 'invalid_client' },
      headers: { 'www-authenticate': 'Basic realm="gpu-platform"' },
    }),
  /**
   * A key whose secret matched but that no longer works: the refusal says why (whoever presents the whole key is its
   * holder, so this tells nothing to a guesser). RFC 6749's `invalid_client`, as every refusal of the grant.
   */
  apiKeyRefused: (why: 'revoked' | 'expired' | 'no role') =>
    new AppError('unauthenticated', API_KEY_REFUSALS[why].code, API_KEY_REFUSALS[why].detail, {
      extra: { error: 'invalid_client' },
      headers: { 'www-authenticate': 'Basic realm="gpu-platform"' },
    }),
  invalidTokenRequest: (detail: string) =>
    new AppError('invalid', 'INVALID_REQUEST', detail, { extra: { error: 'invalid_request' } }),
  unsupportedGrant: (grant: string) =>
    new AppError('invalid', 'UNSUPPORTED_GRANT_TYPE', `grant_type ${grant} is not supported: use client_credentials`, {
      extra: { error: 'unsupported_grant_type' },
      errors: [{ path: 'body.grant_type', message: 'must be client_credentials or api_key' }],
    }),
  /** An SSH public key refused (domain/ssh-keys/public-key.ts): `code` says why, the detail what to send instead. */
  sshKeyRefused: (code: SshKeyRefusal, detail: string) =>
    errors.badRequest(code, detail, { errors: [{ path: 'body.public_key', message: detail }] }),
  sshKeyExists: (fingerprint: string) =>
    errors.conflict('SSH_KEY_EXISTS', `you already registered the key ${fingerprint}`),
  tooManySshKeys: (max: number) =>
    errors.conflict('TOO_MANY_SSH_KEYS', `a user holds at most ${max} SSH keys: remove one`),
  sshKeyNotFound: (id: string) => errors.notFound('SSH_KEY_NOT_FOUND', `SSH key ${id} not found`),
};
