/** Zod schemas shared by the auth routes: request bodies, the user view, the token pair, error responses. */
import { problemSchema, schemaRegistry, USER_ROLES, type UserRole } from '@gpu/common';
import { z } from 'zod';

/** The auth document's named schemas (`components.schemas`). */
export const schemas = schemaRegistry();

export const emailSchema = z.email().max(254).describe('email address; compared case-insensitively');
/** Any printable text, spaces included (NIST SP 800-63B); NUL and other control characters are refused. */
export const passwordSchema = z
  .string()
  .min(1)
  .max(1024)
  // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
  .regex(/^[^\u0000-\u001f\u007f]*$/, 'passwords may not contain control characters');
/** A user's role (machine-client roles belong to clients, not accounts). */
export const roleSchema = z.enum(USER_ROLES);

export const userSchema = z
  .object({
    id: z.uuid(),
    email: z.string(),
    roles: z.array(roleSchema),
    email_verified: z
      .boolean()
      .describe('whether the user proved they read mail at the address (POST /email/verify, or a password reset)'),
    created_at: z.string().describe('RFC 3339, UTC'),
    updated_at: z.string().describe('RFC 3339, UTC'),
  })
  .describe('An account (never its password)')
  .register(schemas, { id: 'User' });

/** An account as the domain holds it, as far as the public view shows it. */
interface Account {
  id: string;
  email: string;
  roles: readonly UserRole[];
  email_verified_at: Date | string | null;
  created_at: Date | string;
  updated_at: Date | string;
}

/** The public view of a user, as every endpoint returns it: roles in a stable order, times in RFC 3339 UTC. */
export function userJson(account: Account): z.infer<typeof userSchema> {
  return {
    id: account.id,
    email: account.email,
    roles: [...account.roles].sort(),
    email_verified: account.email_verified_at !== null,
    created_at: new Date(account.created_at).toISOString(),
    updated_at: new Date(account.updated_at).toISOString(),
  };
}

const tokenPairShape = {
  access_token: z.string().describe('JWT with iss, sub, aud, exp, iat, jti, roles'),
  refresh_token: z.string().describe('opaque; single use: each refresh returns a new one'),
  token_type: z.literal('bearer'),
  expires_in: z.number().int().describe('seconds until the access token expires'),
};

/** The answer of a refresh: a new access token and a new refresh token. */
export const tokenPairSchema = z
  .object(tokenPairShape)
  .describe('An access token and a refresh token')
  .register(schemas, { id: 'TokenPair' });

/** The answer of a login: a token pair and the device token. */
export const loginResponseSchema = z
  .object({
    ...tokenPairShape,
    device_token: z.string().describe('identifies this client to the account at later logins; keep it'),
  })
  .describe('A token pair, and the device token to send with later logins')
  .register(schemas, { id: 'LoginResponse' });

/** The body of a refresh and of a logout. */
export const refreshBodySchema = z
  .object({ refresh_token: z.string().min(1).max(512) })
  .register(schemas, { id: 'RefreshRequest' });

/** Problem responses, keyed by status, for a route's `response` map. */
export function problems(...statuses: number[]): Record<number, typeof problemSchema> {
  return Object.fromEntries(statuses.map((s) => [s, problemSchema]));
}
