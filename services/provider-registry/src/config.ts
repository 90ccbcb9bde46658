/**
 * The provider registry's configuration: the shared settings plus the
 * database, heartbeat/offline timing, messaging and optional JWT enforcement.
 * The spec's flat parameter names (`consul_address`, `service_name`,
 * `service_tags`, `health_check_*`, ...) are accepted in the file and map
 * onto the shared `registry` section.
 */
import { readFileSync } from 'node:fs';
import {
  baseConfigShape,
  baseEnvAliases,
  ConfigError,
  checkSubjectIdentity,
  databaseEnvAliases,
  databaseShape,
  durationMs,
  loadConfig,
  messagingEnvAliases,
  messagingShape,
  subjectIdentityShape,
  zDuration,
  zInt,
} from '@gpu/common';
import { z } from 'zod';

/** The service's port in the platform's table. */
const DEFAULT_PORT = 8002;

/** Spec parameter -> path in the shared `registry` section. */
const FLAT_REGISTRY_KEYS: Record<string, string[]> = {
  consul_address: ['address'],
  service_name: ['registration', 'service_name'],
  service_id_prefix: ['registration', 'id_prefix'],
  service_tags: ['registration', 'tags'],
  health_check_path: ['registration', 'health_check_path'],
  health_check_interval: ['registration', 'health_check_interval'],
  health_check_timeout: ['registration', 'health_check_timeout'],
};

type Tree = Record<string, unknown>;
const isTree = (v: unknown): v is Tree => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Moves the spec's flat keys into `registry` (a `consul_address` switches registration on unless `registry.enabled` is false). */
function mapFlatKeys(input: unknown): unknown {
  if (!isTree(input)) return input;
  const out: Tree = { ...input };
  const registry: Tree = isTree(out.registry) ? { ...out.registry } : {};
  for (const [flat, path] of Object.entries(FLAT_REGISTRY_KEYS)) {
    if (!(flat in out)) continue;
    const value = out[flat];
    delete out[flat];
    if (value === undefined || value === '') continue;
    if (path.length === 1) registry[path[0]!] = value;
    else registry.registration = { ...(isTree(registry.registration) ? registry.registration : {}), [path[1]!]: value };
  }
  out.registry = registry;
  if (typeof out.port === 'string' || typeof out.port === 'number') {
    // The spec writes the port as ":8002".
    out.server = { ...(isTree(out.server) ? out.server : {}), port: String(out.port).replace(/^.*:/, '') };
    delete out.port;
  }
  return out;
}

const registryShape = {
  ...baseConfigShape(DEFAULT_PORT),
  /** Optional JSON file with secrets: `database_url`, or `database: {host, port, user, password, name}`. */
  secrets_file_path: z.string().default(''),
  database: z
    .object({
      /** `url`: postgres:// URL; empty means: build one from the parts below, else use embedded PGlite. */
      ...databaseShape({ embeddedPath: '.data/provider-registry/pglite', poolSize: 20 }),
      host: z.string().default(''),
      port: zInt(1, 65535).default(5432),
      user: z.string().default('postgres'),
      password: z.string().default(''),
      name: z.string().default('provider_registry'),
      sslmode: z.string().default(''),
      /** Attempts of one database operation on transient errors (connection loss, serialization failure). */
      retry_attempts: zInt(1, 20).default(4),
    })
    .prefault({}),
  /** How often provider daemons are expected to send heartbeats. */
  heartbeat_interval: zDuration().default('30s'),
  /** Silence after which a provider is shown and stored as offline; empty = 3 heartbeat intervals. */
  offline_after: z
    .string()
    .default('')
    .refine((s) => s === '' || zDuration().safeParse(s).success, 'expected a duration such as "90s"'),
  /** How often each instance sweeps stale providers to `offline` (and publishes the change). */
  offline_sweep_interval: zDuration().default('5s'),
  sessions: z
    .object({
      /**
       * How long a counted rental end is remembered (it guards against counting a redelivered end twice, which
       * billing's redeliveries bound to an hour); at least a day. `0s`: for ever.
       */
      retention: zDuration()
        .default('7d')
        .refine((d) => durationMs(d) === 0 || durationMs(d) >= 86_400_000, 'at least 1d, or 0s to keep every session'),
    })
    .prefault({}),
  offers: z
    .object({
      /**
       * How often each instance walks every machine with offers to refresh their reliability (the 30-day window rolls
       * on); a status change or a session's end refreshes a machine at once. 0 turns the walk off.
       */
      reliability_refresh: zDuration().default('1h'),
    })
    .prefault({}),
  /**
   * NATS (`nats_url`: empty publishes no events), the JetStream stream capturing the status subject (empty
   * publishes on core NATS without acknowledgement) and the subject of status events.
   */
  messaging: z
    .object({
      ...messagingShape({
        stream: 'REGISTRY',
        subjects: {
          status: 'registry.providers.status',
          billing_events: 'billing.events',
          heartbeats: 'registry.heartbeats',
        },
      }),
      /** The registry's durable consumer on that stream. */
      session_consumer: z.string().min(1).default('provider-registry-sessions'),
      /** The registry's durable consumer of billing's price events (`<billing_events>.pricing.>`) on billing's stream. */
      price_consumer: z.string().min(1).default('provider-registry-prices'),
      /** The registry's durable consumer of billing's statements of held GPUs (`<billing_events>.lease.>`). */
      lease_consumer: z.string().min(1).default('provider-registry-leases'),
      /**
       * Take heartbeats on `<heartbeats>.<owner ID>.<client ID>.<provider ID>` as sent by that owner's daemon client,
       * with no token: only for a NATS server in operator mode where daemons hold the users auth issues
       * (`POST /api/v1/auth/nats-users`), whose permissions the server enforces.
       */
      ...subjectIdentityShape(),
    })
    .superRefine(checkSubjectIdentity)
    .prefault({}),
};

export const registryConfigSchema = z.preprocess(mapFlatKeys, z.object(registryShape));

export type RegistryConfig = z.infer<typeof registryConfigSchema>;

/** Milliseconds of silence after which a provider counts as offline. */
export function offlineAfterMs(config: RegistryConfig): number {
  return config.offline_after ? durationMs(config.offline_after) : 3 * durationMs(config.heartbeat_interval);
}

/** Names of earlier releases, still read (with a warning) for one release. */
const RENAMED = {
  database_url: 'database.url',
  nats_url: 'messaging.nats_url',
  'events.status_subject': 'messaging.subjects.status',
  'events.stream': 'messaging.stream',
  // The registry's own token section became the platform's access control (on by default).
  'auth.enabled': 'access.enabled',
  'auth.issuer': 'access.issuer',
  'auth.audience': 'access.audience',
  'auth.secret': 'access.secret',
  'auth.jwks_url': 'access.jwks_url',
};

/** Loads the configuration file (if any), then the environment (`REGISTRY__...` and the aliases). */
export function loadRegistryConfig(env: NodeJS.ProcessEnv = process.env): RegistryConfig {
  return loadConfig({
    schema: registryConfigSchema,
    envPrefix: 'REGISTRY',
    file: env.REGISTRY_CONFIG_FILE,
    env,
    aliases: {
      ...baseEnvAliases,
      ...databaseEnvAliases,
      ...messagingEnvAliases,
      SECRETS_FILE_PATH: 'secrets_file_path',
      HEARTBEAT_INTERVAL: 'heartbeat_interval',
      OFFLINE_AFTER: 'offline_after',
      SERVICE_NAME: 'registry.registration.service_name',
      SERVICE_ID_PREFIX: 'registry.registration.id_prefix',
      SERVICE_TAGS: 'registry.registration.tags',
      HEALTH_CHECK_PATH: 'registry.registration.health_check_path',
      HEALTH_CHECK_INTERVAL: 'registry.registration.health_check_interval',
      HEALTH_CHECK_TIMEOUT: 'registry.registration.health_check_timeout',
      DB_HOST: 'database.host',
      DB_PORT: 'database.port',
      DB_USER: 'database.user',
      DB_PASSWORD: 'database.password',
      DB_NAME: 'database.name',
    },
    renamed: RENAMED,
  });
}

const secretsSchema = z.object({
  database_url: z.string().optional(),
  database: z
    .object({
      host: z.string().optional(),
      port: zInt(1, 65535).optional(),
      user: z.string().optional(),
      password: z.string().optional(),
      name: z.string().optional(),
      sslmode: z.string().optional(),
    })
    .optional(),
});

function buildUrl(parts: {
  host: string;
  port: number;
  user: string;
  password: string;
  name: string;
  sslmode: string;
}) {
  const url = new URL('postgres://localhost');
  url.hostname = parts.host;
  url.port = String(parts.port);
  url.username = parts.user;
  url.password = parts.password;
  url.pathname = `/${parts.name}`;
  if (parts.sslmode) url.searchParams.set('sslmode', parts.sslmode);
  return url.toString();
}

/**
 * The PostgreSQL URL to use, or '' for embedded PGlite: `database.url`, else
 * the secrets file (`database_url` or parts), else `database.host` and its
 * parts from the configuration or environment.
 */
export function resolveDatabaseUrl(config: RegistryConfig): string {
  if (config.database.url) return config.database.url;
  let parts = { ...config.database };
  if (config.secrets_file_path) {
    let parsed: z.infer<typeof secretsSchema>;
    try {
      parsed = secretsSchema.parse(JSON.parse(readFileSync(config.secrets_file_path, 'utf8')));
    } catch (err) {
      throw new ConfigError(`cannot read secrets file ${config.secrets_file_path}: ${(err as Error).message}`);
    }
    if (parsed.database_url) return parsed.database_url;
    parts = {
      ...parts,
      ...Object.fromEntries(Object.entries(parsed.database ?? {}).filter(([, v]) => v !== undefined)),
    };
  }
  return parts.host ? buildUrl(parts) : '';
}
