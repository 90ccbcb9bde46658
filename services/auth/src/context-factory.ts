/** Makes the AuthContext from configuration: hasher, policy, keys and limiter over an open database. */
import { readFileSync } from 'node:fs';
import { ConfigError, type Logger, type NatsIssuer, parseNatsIssuer, RateLimiter, writeNatsSetup } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { AuthConfig } from './config.ts';
import type { AuthDatabase } from './db/schema.ts';
import type { AuthContext } from './domain/context.ts';
import { createMailer } from './domain/mail/mailer.ts';
import { loadBlocklist, PasswordHasher, PasswordPolicy } from './domain/passwords/index.ts';
import { SigningKeys } from './domain/signing-keys.ts';

/** How long a retired signing key stays published beyond the access-token lifetime (rolling deploys, clock skew). */
const KEY_RETENTION_MARGIN_MS = 10 * 60_000;

export async function createAuthContext(
  config: AuthConfig,
  logger: Logger,
  db: Kysely<AuthDatabase>,
): Promise<AuthContext> {
  const { jwt, password } = config;
  const keys = await SigningKeys.create({
    algorithm: jwt.algorithm,
    secret: jwt.secret_key,
    privateKeyPem: jwt.private_key,
    keyId: jwt.key_id,
    retentionMs: jwt.access_token_expire_minutes * 60_000 + KEY_RETENTION_MARGIN_MS,
    db,
  });
  return {
    db,
    config,
    logger,
    keys,
    natsIssuer: await natsIssuerOf(config.nats),
    hasher: new PasswordHasher({
      memoryKib: password.memory_kib,
      timeCost: password.time_cost,
      parallelism: password.parallelism,
    }),
    policy: new PasswordPolicy({
      minLength: password.min_length,
      maxLength: password.max_length,
      blocklist: loadBlocklist(password.blocklist_file),
    }),
    mailer: createMailer(config.mail, logger),
    limiter: new RateLimiter(db, {
      enabled: config.rate_limit.enabled,
      onPurgeError: (err) => logger.warn({ err }, 'purging ended rate-limit windows failed'),
    }),
  };
}

/** The issuer of daemons' NATS users: from the set-up auth writes, or the issuer file; none without either. */
async function natsIssuerOf(nats: AuthConfig['nats']): Promise<NatsIssuer | undefined> {
  if (nats.setup_dir) {
    if (nats.issuer_file) {
      throw new ConfigError('invalid configuration: set NATS_SETUP_DIR (nats.setup_dir) or NATS_ISSUER_FILE, not both');
    }
    return readNatsIssuer((await writeNatsSetup(nats.setup_dir)).issuer);
  }
  return nats.issuer_file ? readNatsIssuer(nats.issuer_file) : undefined;
}

/** The NATS issuer's seeds, read once at start-up: a missing or bad file stops auth naming it. */
function readNatsIssuer(file: string): NatsIssuer {
  try {
    return parseNatsIssuer(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`cannot read NATS_ISSUER_FILE ${file}: ${(err as Error).message}`);
  }
}
