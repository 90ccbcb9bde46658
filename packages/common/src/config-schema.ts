/**
 * Building blocks of every service's configuration schema. Values may come
 * from YAML (typed) or from the environment (strings), so the scalar helpers
 * accept both.
 */
import { z } from 'zod';
import { VERIFIED_EMAIL_ACTIONS, type VerifiedEmailAction } from './auth/verified-email.ts';
import { durationMs, zDuration, zDurationAtLeast } from './duration.ts';
import { MAX_SOCKET_PATH_BYTES } from './http/gateway-socket.ts';

/** A boolean that also accepts "true"/"false"/"1"/"0"/"yes"/"no" from the environment. */
export const zBool = () =>
  z
    .union([z.boolean(), z.enum(['true', 'false', '1', '0', 'yes', 'no', 'TRUE', 'FALSE'])])
    // Outside the union, so that the documents state both forms whatever wraps the schema (a transform inside a union
    // that carries a description lost the words from the generated JSON Schema).
    .transform((v) => (typeof v === 'boolean' ? v : ['true', '1', 'yes', 'TRUE'].includes(v)));

/**
 * An integer in [min, max] that also accepts its decimal string form (spaces around it allowed). Nothing else is
 * taken for one: an empty variable, a YAML null or `true` were 0 or 1 to a coercion (an empty `PORT` listened on any
 * free port).
 */
export const zInt = (min = 0, max = Number.MAX_SAFE_INTEGER) =>
  // A preprocess, not a union: documents (OpenAPI of the routes that take one) state an integer and its bounds.
  z.preprocess(
    (v) => (typeof v === 'string' && /^\s*[+-]?\d+\s*$/.test(v) ? Number(v) : v),
    z.number({ error: 'expected an integer' }).int().min(min).max(max),
  );

/** A list of strings: a YAML list, or a comma-separated string from the environment. */
export const zList = () =>
  z.union([
    z.array(z.string()),
    z.string().transform((s) =>
      s
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean),
    ),
  ]);

export const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The Consul agent contacted when registration is switched on without an address. */
const DEFAULT_CONSUL_ADDRESS = '127.0.0.1:8500';

/**
 * Consul registration. Configuring an agent address (file or environment)
 * switches registration on; an explicit `enabled` decides either way.
 */
export const registrySchema = z
  .object({
    /** Unset: on exactly when `address` is configured. */
    enabled: zBool().optional(),
    /** host:port or URL of the Consul agent; `DEFAULT_CONSUL_ADDRESS` when unset. */
    address: z.string().optional(),
    /**
     * ACL token the service registers and deregisters with (sent as `X-Consul-Token`), for an agent with ACLs on;
     * empty: none (an agent without ACLs). Its policy needs `service:write` on the service's name.
     */
    token: z.string().default(''),
    registration: z
      .object({
        service_name: z.string().default(''),
        id_prefix: z.string().default(''),
        tags: zList().default([]),
        /** Address announced to the registry; the listen host when empty (0.0.0.0 -> 127.0.0.1). */
        address: z.string().default(''),
        /** The path Consul's check calls; unset: the app's health route (`server.health_path`). */
        health_check_path: z.string().optional(),
        health_check_interval: zDuration().default('10s'),
        health_check_timeout: zDuration().default('5s'),
        deregister_critical_after: zDuration().default('1m'),
      })
      .prefault({}),
  })
  .prefault({})
  .transform(({ enabled, address, ...rest }) => ({
    enabled: enabled ?? Boolean(address),
    address: address || DEFAULT_CONSUL_ADDRESS,
    ...rest,
  }));

/**
 * Access control (`access`): how a service verifies the platform's access tokens. On by default everywhere;
 * `enabled: false` lets every request act as an admin and is for an isolated development setup only (the
 * service warns at start-up).
 */
export const accessSchema = z
  .object({
    enabled: zBool().default(true),
    /** The auth service's JWKS, for EdDSA (the default), ES256 and RS256 tokens. */
    jwks_url: z.string().default('http://127.0.0.1:8000/.well-known/jwks.json'),
    /** An HS256 shared secret instead of the JWKS (a single-process setup); at least 32 characters. */
    secret: z
      .string()
      .default('')
      .refine((s) => s === '' || s.length >= 32, 'an HS256 secret needs at least 32 characters'),
    issuer: z.string().min(1).default('gpu-platform-auth'),
    audience: z.string().min(1).default('gpu-platform'),
    /** How long a fetched JWKS is used before it is fetched again (an unknown `kid` fetches it sooner). */
    jwks_cache: zDuration().default('10m'),
    /**
     * The actions a user takes only with a verified e-mail address (auth/verified-email.ts): any of withdrawals,
     * payouts, sessions, api_keys; empty: none.
     */
    require_verified_email: zList()
      .refine((list) => list.every((a) => (VERIFIED_EMAIL_ACTIONS as readonly string[]).includes(a)), {
        error: `expected a list of ${VERIFIED_EMAIL_ACTIONS.join(', ')}`,
      })
      .transform((list) => list as VerifiedEmailAction[])
      .default(['withdrawals', 'payouts']),
  })
  .prefault({});

/**
 * A service's audit trail (db/audit-trail.ts): how long its events are kept (purged hourly; the database refuses to
 * delete a younger one); 0: forever, else a day at least (a slip of the unit, `400s` for `400d`, would otherwise have
 * the next purge take every event but the last few minutes'). `purge_url`: the role that purges them (db/roles.ts), a
 * postgres:// URL; empty: the service's own connection purges, where its role may (the owner's, in a quick set-up).
 */
export const auditSchema = z
  .object({
    retention: zDuration()
      .default('400d')
      .refine((d) => durationMs(d) === 0 || durationMs(d) >= 86_400_000, {
        message: 'keep the audit trail a day at least (or 0: for ever)',
      }),
    purge_url: z.string().default(''),
  })
  .prefault({});

/**
 * The `database` keys of a service that keeps an audit trail (auth, billing), beside `databaseShape`'s
 * (db/roles.ts): `migration_url`, the schema owner's URL the migrations run through (then the role of `url` is
 * granted what the service needs, and may only append to and read the trail); `migrate_only`, migrate and exit (a
 * deployment's migration step, with the owner's URL, before the service starts without it).
 */
export function migrationShape() {
  return {
    migration_url: z.string().default(''),
    migrate_only: zBool().default(false),
  };
}

/** Environment names of `migrationShape`'s keys and the audit trail's purge role. */
export const auditDatabaseEnvAliases: Record<string, string> = {
  DATABASE_MIGRATION_URL: 'database.migration_url',
  MIGRATE_ONLY: 'database.migrate_only',
  AUDIT_PURGE_URL: 'audit.purge_url',
};

/**
 * The shape of the settings every service shares. A service spreads it into
 * its own schema: `z.object({ ...baseConfigShape(8001), object_store: ... })`.
 */
export function baseConfigShape(defaultPort: number) {
  return {
    instance_id: z.string().default(''),
    log_level: z.enum(logLevels).default('info'),
    log_pretty: zBool().default(false),
    // Zero would turn the request timeout off, and have a shutdown give up at once (exit 1, nothing drained).
    request_timeout: zDurationAtLeast('100ms').default('30s'),
    shutdown_timeout: zDurationAtLeast('1s').default('10s'),
    server: z
      .object({
        host: z.string().default('0.0.0.0'),
        port: zInt(0, 65535).default(defaultPort),
        /** Trust X-Forwarded-For / X-Real-IP from these proxies (CIDRs or addresses); empty trusts none. */
        trusted_proxies: zList().default([]),
        /**
         * A Unix socket (in a folder of this user's alone) the service also answers on, for its gateway: on that
         * socket only, X-Forwarded-For names the client (http/gateway-socket.ts). Empty: none.
         */
        gateway_socket: z
          .string()
          .refine((p) => Buffer.byteLength(p) <= MAX_SOCKET_PATH_BYTES, {
            error: `a Unix socket path must be at most ${MAX_SOCKET_PATH_BYTES} bytes long`,
          })
          .default(''),
        /** Allowed CORS origins; "*" allows any. */
        cors_origins: zList().default(['*']),
        docs_enabled: zBool().default(true),
        metrics_enabled: zBool().default(true),
        health_path: z.string().default('/health'),
      })
      .prefault({}),
    registry: registrySchema,
    access: accessSchema,
  };
}

/** The shared settings alone (port 8080), for tests and the common code's types. */
export const baseConfigSchema = z.object(baseConfigShape(8080));

export type BaseConfig = z.infer<typeof baseConfigSchema>;

/** Environment names every service understands, besides `<PREFIX>__SECTION__KEY`. */
export const baseEnvAliases: Record<string, string> = {
  PORT: 'server.port',
  HOST: 'server.host',
  LOG_LEVEL: 'log_level',
  LOG_PRETTY: 'log_pretty',
  REQUEST_TIMEOUT: 'request_timeout',
  INSTANCE_ID: 'instance_id',
  CONSUL_ADDRESS: 'registry.address',
  CONSUL_ENABLED: 'registry.enabled',
  // Consul's own name for the token its tools send.
  CONSUL_HTTP_TOKEN: 'registry.token',
  ACCESS_CONTROL_ENABLED: 'access.enabled',
  AUTH_JWKS_URL: 'access.jwks_url',
  AUTH_ISSUER: 'access.issuer',
  AUTH_AUDIENCE: 'access.audience',
  REQUIRE_VERIFIED_EMAIL: 'access.require_verified_email',
};

/**
 * The `database` section every service with a database spreads into its own (same key names everywhere): `url`
 * (postgres://; empty opens an embedded PGlite database at `embedded_path`), `embedded_template_dir`, `pool_size`,
 * `connect_timeout`. A service adds keys of its own with `.extend()`.
 */
export function databaseShape(defaults: { embeddedPath: string; poolSize?: number }) {
  return {
    /** postgres:// URL; empty opens an embedded PGlite database at `embedded_path`. */
    url: z.string().default(''),
    embedded_path: z.string().default(defaults.embeddedPath),
    /**
     * A folder where an empty embedded database is made once and copied for each new one (a second instead of
     * initdb's seconds of CPU; `pnpm start` sets it); empty: each new embedded database is made anew.
     */
    embedded_template_dir: z.string().default(''),
    pool_size: zInt(1, 500).default(defaults.poolSize ?? 10),
    connect_timeout: zDuration().default('5s'),
  };
}

/**
 * The `messaging` section every service that uses NATS spreads into its own: `nats_url` (empty: no messaging),
 * `stream` (the JetStream stream capturing the service's subjects) and `subjects` (the service's subject names or
 * prefixes, with their defaults).
 */
export function messagingShape<S extends Record<string, string>>(defaults: { stream: string; subjects: S }) {
  const subjects = Object.fromEntries(
    Object.entries(defaults.subjects).map(([k, v]) => [k, z.string().min(1).default(v)]),
  ) as { [K in keyof S]: z.ZodDefault<z.ZodString> };
  return {
    /** NATS server URL (comma-separated for a cluster); empty turns messaging off. */
    nats_url: z.string().default(''),
    /** A `.creds` file (user JWT and seed) for a NATS server in operator mode; empty: connect without credentials. */
    nats_credentials: z.string().default(''),
    /** JetStream stream capturing the service's subjects. */
    stream: z.string().default(defaults.stream),
    subjects: z.object(subjects).prefault({} as never),
  };
}

/**
 * `subject_identity` of a messaging section: take messages on subjects that name their sender
 * (`<prefix>.<owner ID>.<client ID>.<...>`, a provider daemon's NATS user: `messaging/nats-auth.ts`) as that sender's,
 * with no token. Safe only where the NATS server enforces who may publish there, so only with credentials (a server
 * in operator mode): `checkSubjectIdentity` refuses it otherwise.
 */
export const subjectIdentityShape = () => ({ subject_identity: zBool().default(false) });

/** A refinement of a messaging section with `subjectIdentityShape`: no trusted subjects on a server that admits anyone. */
export function checkSubjectIdentity(
  m: { subject_identity: boolean; nats_url: string; nats_credentials: string },
  ctx: z.RefinementCtx,
): void {
  if (m.subject_identity && m.nats_url && !m.nats_credentials) {
    ctx.addIssue({
      code: 'custom',
      path: ['subject_identity'],
      message: 'needs messaging.nats_credentials: a NATS server in operator mode, which enforces who may publish',
    });
  }
}

/**
 * A service's own machine client at the auth service, for the calls it makes to another service: where to get its
 * token (`auth_url`), and its credentials (`client_id` and `client_secret`, or `credentials_file`, a JSON file
 * `{client_id, client_secret}` as auth's bootstrap writes it, read when first needed).
 */
export function machineClientShape() {
  return {
    auth_url: z.string().default('http://127.0.0.1:8000'),
    client_id: z.string().default(''),
    client_secret: z.string().default(''),
    credentials_file: z.string().default(''),
  };
}

/** Environment names for the shared sections, for services that have them. */
export const databaseEnvAliases: Record<string, string> = {
  DATABASE_URL: 'database.url',
  DATABASE_POOL_SIZE: 'database.pool_size',
};
export const messagingEnvAliases: Record<string, string> = {
  NATS_URL: 'messaging.nats_url',
  NATS_CREDENTIALS: 'messaging.nats_credentials',
};
