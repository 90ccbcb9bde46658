/** What the auth flows need: the database and the building blocks made once at start-up. */
import type { Logger, NatsIssuer, RateLimiter } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { AuthConfig } from '../config.ts';
import type { AuthDatabase } from '../db/schema.ts';
import type { Mailer } from './mail/mailer.ts';
import type { PasswordHasher } from './passwords/hasher.ts';
import type { PasswordPolicy } from './passwords/policy.ts';
import type { SigningKeys } from './signing-keys.ts';

/** The request a context serves (routes/request.ts): for the audit trail. */
interface RequestOrigin {
  ip: string;
  requestId: string;
}

export interface AuthContext {
  db: Kysely<AuthDatabase>;
  config: AuthConfig;
  logger: Logger;
  hasher: PasswordHasher;
  policy: PasswordPolicy;
  keys: SigningKeys;
  /** Rate limits counted in the database, so they hold across instances. */
  limiter: RateLimiter;
  /** The platform NATS account's seeds that sign daemons' users (`nats.issuer_file`); absent: none are issued. */
  natsIssuer?: NatsIssuer;
  /** Outgoing mail, and work done after a request's answer. */
  mailer: Mailer;
  /** The request being served, when there is one. */
  origin?: RequestOrigin;
}
