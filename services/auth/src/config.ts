/**
 * The auth service's configuration: the shared settings plus the database,
 * token, password, rate-limit and initial-admin sections. Environment names
 * of the spec (`DATABASE_URL`, `SECRET_KEY`/`JWT_SECRET`, `ALGORITHM`,
 * `ACCESS_TOKEN_EXPIRE_MINUTES`) are aliases of the structured keys.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import {
  auditDatabaseEnvAliases,
  auditSchema,
  baseConfigShape,
  baseEnvAliases,
  ConfigError,
  createFileOnce,
  databaseEnvAliases,
  databaseShape,
  durationMs,
  loadConfig,
  migrationShape,
  zBool,
  zDuration,
  zInt,
  zList,
} from '@gpu/common';
import { z } from 'zod';
import { generatePrivateKeyPem } from './domain/key-material.ts';
import { ALGORITHMS, MIN_SECRET_LENGTH } from './jwt-settings.ts';

export type { Algorithm } from './jwt-settings.ts';

/** The service's port in the platform's table. */
const DEFAULT_PORT = 8000;

const RATE = /^\s*(\d+)\s*\/\s*(.+)$/;

/** A rate limit: at most `max` events per `windowMs`. */
export interface Rate {
  max: number;
  windowMs: number;
}

/**
 * A rate limit written "N/duration" ("10/15m": at most 10 per 15 minutes).
 * The parsed form is accepted too, since the loader re-validates its defaults.
 */
export const zRate = () =>
  z.union([
    z.object({ max: z.number().int().positive(), windowMs: z.number().int().positive() }),
    z
      .string()
      .refine((s) => {
        const m = RATE.exec(s);
        return m !== null && Number(m[1]) > 0 && durationOk(m[2]!);
      }, 'expected "N/duration", for example "10/15m"')
      .transform((s): Rate => {
        const m = RATE.exec(s)!;
        return { max: Number(m[1]), windowMs: durationMs(m[2]!.trim()) };
      }),
  ]);

function durationOk(s: string): boolean {
  try {
    return durationMs(s.trim()) > 0;
  } catch {
    return false;
  }
}

export const authConfigSchema = z.object({
  ...baseConfigShape(DEFAULT_PORT),
  /** `production` refuses to start with a missing or short secret or a missing private key. */
  environment: z.enum(['development', 'test', 'production']).default('development'),
  /**
   * `url` (postgres://; empty opens an embedded PGlite database at `embedded_path`), `pool_size`, `connect_timeout`;
   * `migration_url`, `migrate_only` (the owner's migration step: @gpu/common's db/roles.ts).
   */
  database: z.object({ ...databaseShape({ embeddedPath: '.data/auth/pglite' }), ...migrationShape() }).prefault({}),
  jwt: z
    .object({
      secret_key: z.string().default(''),
      /** EdDSA by default: other services verify with the published JWKS and hold no signing secret. */
      algorithm: z.enum(ALGORITHMS).default('EdDSA'),
      /** PKCS#8 PEM private key for EdDSA/ES256/RS256 (or `private_key_file`). */
      private_key: z.string().default(''),
      private_key_file: z.string().default(''),
      /** `kid` of the signing key; its RFC 7638 thumbprint when empty. */
      key_id: z.string().default(''),
      access_token_expire_minutes: zInt(1, 24 * 60).default(15),
      refresh_token_expire: zDuration().default('30d'),
      /** A rotated refresh token presented again within this interval is not treated as reuse. */
      refresh_reuse_interval: zDuration().default('10s'),
      issuer: z.string().min(1).default('gpu-platform-auth'),
      audience: z.string().min(1).default('gpu-platform'),
    })
    .prefault({}),
  password: z
    .object({
      min_length: zInt(8, 64).default(8),
      max_length: zInt(64, 1024).default(128),
      /** Extra blocked passwords, one per line, added to the shipped list. */
      blocklist_file: z.string().default(''),
      /** argon2id cost; never below OWASP's minimum (19 MiB, 2 passes, 1 lane). */
      memory_kib: zInt(19_456, 4_194_304).default(19_456),
      time_cost: zInt(2, 100).default(2),
      parallelism: zInt(1, 16).default(1),
    })
    .prefault({}),
  rate_limit: z
    .object({
      enabled: zBool().default(true),
      /** Login attempts per source (a client IPv4 address, or IPv6 /64), whatever the account. */
      login_per_ip: zRate().prefault('20/1m'),
      /**
       * Failed logins per account (email, known or not) from one source, from clients without the account's device
       * token: 429 for that source alone (domain/login-limits.ts).
       */
      login_per_account_ip: zRate().prefault('10/15m'),
      /**
       * Failed logins per account from every source together, from clients without its device token: a ceiling only
       * guessing from many sources reaches; past it new sources wait, trusted devices and reset links still work.
       */
      login_per_account: zRate().prefault('100/15m'),
      /** Failed logins per trusted device (a client presenting the device token an earlier login gave it). */
      login_per_device: zRate().prefault('10/15m'),
      /** How long a device token keeps a client trusted. */
      device_token_lifetime: zDuration().default('90d'),
      register_per_ip: zRate().prefault('10/1h'),
      register_per_account: zRate().prefault('5/1h'),
      refresh_per_ip: zRate().prefault('60/1m'),
      refresh_per_account: zRate().prefault('30/1m'),
      /** Client-credential token requests per client IP. */
      token_per_ip: zRate().prefault('120/1m'),
      /** Failed client-credential attempts per client ID. */
      token_failures_per_client: zRate().prefault('10/15m'),
      /** Verification mails a user asks for. */
      verification_per_account: zRate().prefault('3/1h'),
      /** Password-reset requests per client IP (429 past it). */
      reset_per_ip: zRate().prefault('10/1h'),
      /**
       * Reset mails per address and asking client, known address or not (past it the answer is the same and nothing
       * is sent): one client cannot spend another's resets.
       */
      reset_per_account: zRate().prefault('3/1h'),
      /** Reset mails per address from all clients together (a mailbox is not flooded from many addresses). */
      reset_per_address: zRate().prefault('10/1h'),
      /** Mailed tokens presented per client IP (to verify an address or reset a password). */
      email_token_per_ip: zRate().prefault('30/1m'),
    })
    .prefault({}),
  clients: z
    .object({
      /** How long a client's previous secret keeps working after a rotation (unless the rotation says otherwise). */
      rotation_grace: zDuration().default('1h'),
      /** Clients the platform itself needs, created at start-up: `name:role` (role service, gateway or scheduler). */
      bootstrap: zList().default([]),
      /** Where the bootstrap clients' secrets are written, one `<name>.json` each (mode 0600). */
      secrets_dir: z.string().default(''),
    })
    .prefault({}),
  /** Users' API keys (domain/api-keys.ts). */
  api_keys: z
    .object({
      /**
       * How long the access token a key is exchanged for lives: how long after a key is revoked a program may still
       * use the token it already had (every instance refuses the key itself at once).
       */
      token_ttl: zDuration().default('2m'),
      /** Keys one user may hold at once (not revoked). */
      max_per_user: zInt(1, 1000).default(50),
    })
    .prefault({}),
  /** Outgoing mail (domain/mail/mailer.ts): address verification, password resets, notices. */
  mail: z
    .object({
      /**
       * The SMTP server: `smtp://user:password@host:587` (STARTTLS when the server offers it) or `smtps://...:465`.
       * Empty: no mail is sent (the service warns at start-up), so nobody can verify an address or reset a password.
       */
      smtp_url: z.string().default(''),
      from: z.string().min(3).default('GPU platform <no-reply@gpu-platform.localhost>'),
      /**
       * A page of yours that takes a verification token: `{token}` is replaced by it. Empty: the mail gives the
       * token and the `gpu` command that uses it.
       */
      verify_url: z.string().default(''),
      /** The same for a password reset. */
      reset_url: z.string().default(''),
      /** One message's time limit (connecting, sending); a failed message is tried twice more. */
      send_timeout: zDuration().default('30s'),
    })
    .prefault({}),
  /** Verifying addresses and resetting passwords by mailed tokens (domain/mail/recovery.ts). */
  recovery: z
    .object({
      /** How long a verification link works. */
      verify_token_ttl: zDuration().default('24h'),
      /** How long a reset link works. */
      reset_token_ttl: zDuration().default('30m'),
      /** Mail a verification link at registration (else the user asks for one). */
      verify_on_register: zBool().default(true),
    })
    .prefault({}),
  /** Provider daemons' NATS users (domain/nats-users/), for a NATS server in operator mode. */
  nats: z
    .object({
      /**
       * A JSON file with the seeds of the platform's NATS account (`account`) and of its signing key (`signer`), as
       * the trust file of a NATS server in operator mode holds them; empty: no NATS users are issued (404).
       */
      issuer_file: z.string().default(''),
      /**
       * A folder where auth writes the platform's NATS set-up at start-up (`writeNatsSetup`: the trust, made at the
       * first start and kept; `accounts.conf` for the server; each platform service's `creds/<name>.creds`) and issues
       * daemons' users with it, instead of `issuer_file` (docker-compose: the server and the services read the folder).
       */
      setup_dir: z.string().default(''),
      /** How long an issued user lives (the daemon asks for the next one before). */
      user_ttl: zDuration().default('15m'),
      /**
       * The subject prefixes a daemon's user may publish under: the registry's heartbeats, billing's usage requests
       * (billing's `messaging.subjects.usage_reports`). No stream may capture them: nats-server sends a stream's
       * acknowledgement to whatever reply subject the publisher names.
       */
      heartbeat_subject: z.string().min(1).default('registry.heartbeats'),
      usage_reports_subject: z.string().min(1).default('billing.usage-reports'),
      /** The subject prefix of billing's nudges to machines, which a daemon's user may subscribe to for its owner. */
      nudge_subject: z.string().min(1).default('billing.events.machine'),
    })
    .prefault({}),
  /** The audit trail (domain/audit.ts): `retention`. */
  audit: auditSchema,
  admin: z
    .object({
      /** The initial admin, created at start-up when no admin exists. */
      email: z.string().default(''),
      password: z.string().default(''),
    })
    .prefault({}),
});

export type AuthConfig = z.infer<typeof authConfigSchema>;

/** Environment names of the spec and the issue, mapped to the structured keys. */
export const authEnvAliases: Record<string, string> = {
  ...baseEnvAliases,
  ...databaseEnvAliases,
  ...auditDatabaseEnvAliases,
  APP_ENV: 'environment',
  JWT_SECRET: 'jwt.secret_key',
  SECRET_KEY: 'jwt.secret_key',
  ALGORITHM: 'jwt.algorithm',
  JWT_PRIVATE_KEY: 'jwt.private_key',
  JWT_PRIVATE_KEY_FILE: 'jwt.private_key_file',
  JWT_KEY_ID: 'jwt.key_id',
  ACCESS_TOKEN_EXPIRE_MINUTES: 'jwt.access_token_expire_minutes',
  REFRESH_TOKEN_EXPIRE: 'jwt.refresh_token_expire',
  REFRESH_REUSE_INTERVAL: 'jwt.refresh_reuse_interval',
  JWT_ISSUER: 'jwt.issuer',
  JWT_AUDIENCE: 'jwt.audience',
  ADMIN_EMAIL: 'admin.email',
  ADMIN_PASSWORD: 'admin.password',
  RATE_LIMIT_ENABLED: 'rate_limit.enabled',
  SMTP_URL: 'mail.smtp_url',
  NATS_ISSUER_FILE: 'nats.issuer_file',
  NATS_SETUP_DIR: 'nats.setup_dir',
  MAIL_FROM: 'mail.from',
};

/**
 * Names other services used before the one vocabulary, still read (with a warning) for one release. camelCase
 * spellings of the snake_case keys (`jwt.secretKey`) are taken with a warning without being listed here.
 */
const authRenamed: Record<string, string> = { database_url: 'database.url' };

/**
 * Rules that span keys; production refuses what development only warns about. Returns the warnings. A migration step
 * (database.migrate_only) signs nothing and mails nothing: none of these are its concern.
 */
export function checkAuthConfig(config: AuthConfig): string[] {
  const warnings: string[] = [];
  if (config.database.migrate_only) return warnings;
  const production = config.environment === 'production';
  const { jwt } = config;
  const problem = (message: string) => {
    if (production) throw new ConfigError(`invalid configuration: ${message}`);
    warnings.push(`${message} (refused in production)`);
  };
  if (jwt.algorithm === 'HS256') {
    if (!jwt.secret_key) problem('SECRET_KEY (jwt.secret_key) is not set: a random secret is used for this run only');
    else if (jwt.secret_key.length < MIN_SECRET_LENGTH) {
      problem(`SECRET_KEY (jwt.secret_key) is shorter than ${MIN_SECRET_LENGTH} characters`);
    }
  } else if (!jwt.private_key && !jwt.private_key_file) {
    problem(
      `ALGORITHM ${jwt.algorithm} needs JWT_PRIVATE_KEY or JWT_PRIVATE_KEY_FILE: a key pair is generated for this run only`,
    );
  }
  if (!config.mail.smtp_url) {
    // Withdrawals and payouts need a verified address by default (access.require_verified_email): without mail,
    // nobody could ever verify one.
    problem(
      'SMTP_URL (mail.smtp_url) is not set: no mail is sent, so nobody can verify an address or reset a password',
    );
  } else if (!/^smtps?:\/\//.test(config.mail.smtp_url)) {
    throw new ConfigError('invalid configuration: SMTP_URL (mail.smtp_url) must start with smtp:// or smtps://');
  }
  for (const key of ['verify_url', 'reset_url'] as const) {
    const url = config.mail[key];
    if (url && !url.includes('{token}')) {
      throw new ConfigError(`invalid configuration: mail.${key} must contain {token}`);
    }
    // In the fragment, the code never leaves the browser: not in the page's request, its server's logs, nor in the
    // Referer of what the page loads or links to.
    if (url && !/#.*\{token\}/.test(url)) {
      throw new ConfigError(
        `invalid configuration: mail.${key} must carry {token} in its fragment, after # (https://app.example/reset#token={token}), never in the path or query`,
      );
    }
  }
  // The examples' placeholder (docker-compose.yml's `change-me-admin-password`) passes the password policy.
  if (config.admin.password && /change-?me/i.test(config.admin.password)) {
    problem('ADMIN_PASSWORD (admin.password) is an example\'s placeholder ("change-me")');
  }
  if (Boolean(config.admin.email) !== Boolean(config.admin.password)) {
    throw new ConfigError('invalid configuration: set both ADMIN_EMAIL and ADMIN_PASSWORD, or neither');
  }
  return warnings;
}

/** Loads the configuration: defaults, then `AUTH_CONFIG_FILE` when set, then the environment. */
export function loadAuthConfig(env: NodeJS.ProcessEnv = process.env): AuthConfig {
  const config = loadConfig({
    schema: authConfigSchema,
    envPrefix: 'AUTH',
    file: env.AUTH_CONFIG_FILE,
    env,
    aliases: authEnvAliases,
    renamed: authRenamed,
    overrides: env.NODE_ENV === 'production' && !env.APP_ENV ? { environment: 'production' } : undefined,
  });
  if (config.jwt.private_key_file && !config.jwt.private_key) {
    const file = config.jwt.private_key_file;
    if (config.jwt.algorithm !== 'HS256' && config.environment !== 'production' && !existsSync(file)) {
      // First start of a development setup (`pnpm start`): make the key pair once and keep it, so tokens stay
      // valid across restarts. Production refuses to start without the key (checkAuthConfig).
      mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
      // Made whole or not at all: an instance starting beside this one reads this key or its own, never half of one.
      createFileOnce(file, generatePrivateKeyPem(config.jwt.algorithm), 0o600);
    }
    try {
      config.jwt.private_key = readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError(
        `cannot read JWT_PRIVATE_KEY_FILE ${config.jwt.private_key_file}: ${(err as Error).message}`,
      );
    }
  }
  return config;
}
