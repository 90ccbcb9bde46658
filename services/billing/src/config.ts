/**
 * The billing service's configuration: the shared settings plus database,
 * blockchain, pricing, billing and messaging sections. Defaults follow the
 * platform contract's "Billing defaults" table.
 */
import {
  auditDatabaseEnvAliases,
  auditSchema,
  baseConfigShape,
  baseEnvAliases,
  checkSubjectIdentity,
  DEFAULT_BASE_RATES,
  DEFAULT_POWER_RATE_PER_WATT_HOUR,
  DEFAULT_VRAM_RATE_PER_GB_HOUR,
  databaseEnvAliases,
  databaseShape,
  loadConfig,
  machineClientShape,
  messagingEnvAliases,
  messagingShape,
  migrationShape,
  parseDuration,
  subjectIdentityShape,
  zBool,
  zDuration,
  zDurationAtLeast,
  zInt,
} from '@gpu/common';
import { Decimal } from 'decimal.js';
import { z } from 'zod';

/** The service's port in the platform's table. */
const DEFAULT_PORT = 8003;

/** A non-negative decimal string (or number from YAML) kept as a string for exact arithmetic. */
const zDecimal = () =>
  z.union([z.string(), z.number()]).transform((v, ctx) => {
    const s = String(v).trim();
    if (!/^\d+(\.\d+)?$/.test(s)) {
      ctx.addIssue({ code: 'custom', message: `"${s}" is not a non-negative decimal number` });
      return z.NEVER;
    }
    return s;
  });

export const billingConfigSchema = z.object({
  ...baseConfigShape(DEFAULT_PORT),
  /**
   * The shared database section: `url` (empty: embedded PGlite at `embedded_path`), `pool_size`, `connect_timeout`;
   * and `migration_url`, `migrate_only` (the owner's migration step: @gpu/common's db/roles.ts).
   */
  database: z
    .object({ ...databaseShape({ embeddedPath: '.data/billing/pglite', poolSize: 10 }), ...migrationShape() })
    .prefault({}),
  blockchain: z
    .object({
      rpc_url: z.string().default('http://127.0.0.1:8899'),
      /** WebSocket URL; derived from rpc_url when empty. */
      ws_url: z.string().default(''),
      /** The platform token's mint address (base58). */
      token_mint: z.string().default(''),
      /** The platform treasury wallet (owner of the token account deposits go to). */
      treasury_address: z.string().default(''),
      /** Path of the treasury's keypair file (a JSON array of 64 bytes, as `solana-keygen` writes). */
      private_key_path: z.string().default(''),
      /**
       * Commitment at which deposits are verified and withdrawals count as confirmed. Not `processed`: a transfer seen
       * only there may be on a fork that is dropped, and a withdrawal settled on it would be debited and never paid.
       */
      commitment: z.enum(['confirmed', 'finalized']).default('finalized'),
      /** Decimals of the token mint; the ledger's NUMERIC scale (fixed when the database is created). */
      token_decimals: zInt(0, 18).default(6),
      /** How long start-up keeps trying to reach the RPC node and read the mint. */
      connect_timeout: zDuration().default('30s'),
      /** How long a withdrawal request waits for confirmation before answering 202 (pending). */
      confirm_timeout: zDuration().default('20s'),
      /**
       * Used only when token_mint is empty: the file the localnet setup writes
       * (tools/solana-localnet), naming the mint, its decimals and the treasury keypair file.
       */
      localnet_file: z.string().default('.data/solana/mint.json'),
      /**
       * How long start-up waits for localnet_file to appear when it is not there yet: `pnpm start` starts billing
       * alongside the localnet, whose setup writes the file. 0: no wait; without the file billing runs with no chain.
       */
      localnet_wait: zDuration().default('0s'),
    })
    .prefault({}),
  pricing: z
    .object({
      base_rates: z.record(z.string(), zDecimal()).default({ ...DEFAULT_BASE_RATES }),
      vram_rate_per_gb_hour: zDecimal().default(DEFAULT_VRAM_RATE_PER_GB_HOUR),
      power_rate_per_watt_hour: zDecimal().default(DEFAULT_POWER_RATE_PER_WATT_HOUR),
      /** Platform fee in percent of a session's cost. */
      platform_fee_percent: zDecimal().default('5'),
      /**
       * Tokens per GB-hour (2^30 bytes for an hour) of stored objects, charged to the owner of the bucket (or of the
       * folder in the shared bucket) as the storage service measures them: 0.0001 is about 0.073 a GB-month.
       */
      storage_rate_per_gb_hour: zDecimal().default('0.0001'),
      /** The highest rates a provider may set (PUT /provider/{id}/rates): per GPU-hour, per GB-hour, per W-hour. */
      provider_rate_limits: z
        .object({
          base_rate: zDecimal().default('1000'),
          vram_rate_per_gb_hour: zDecimal().default('10'),
          power_rate_per_watt_hour: zDecimal().default('1'),
        })
        .prefault({}),
    })
    .prefault({}),
  /** The audit trail of money-out actions (migration 0018, http/audit-hook.ts of @gpu/common). */
  audit: auditSchema,
  billing: z
    .object({
      billing_interval: zDuration().default('1m'),
      /**
       * How often billing looks for capped sessions whose cap's time is over (`cap_ends_at`) and ends them: the most a
       * capped session holds its GPUs past the time its cap paid for (plus the time to end it). 0 leaves it to the
       * billing cycle (`billing_interval`).
       */
      spend_cap_check_interval: zDuration().default('5s'),
      grace_period: zDuration().default('5m'),
      /** How long session events are kept for the sessions' parties to read (GET /billing/events); 0 keeps them. */
      event_retention: zDuration().default('30d'),
      /**
       * How long a session's usage records (one per daemon report) are kept after it ended; then they are deleted (the
       * session, its billing record and the ledger keep what was billed). 0 keeps them.
       */
      usage_retention: zDuration().default('90d'),
      minimum_balance: zDecimal().default('1.0'),
      initial_period: zDuration().default('1h'),
      /** A running session's hold is topped up (by another initial_period) when it covers less than this beyond the billed cost. */
      hold_top_up_below: zDuration().default('10m'),
      /**
       * A running session whose funds left (its hold and the renter's available balance) pay for less than this much
       * running warns its renter once (the `session.low_balance` event, `low_balance_since` on the session), before
       * the grace period starts; 0 turns the warning off.
       */
      low_balance_warning: zDuration().default('15m'),
      minimum_payout: zDecimal().default('10'),
      /**
       * Tokens withheld from a withdrawal or payout whose transfer must create the destination's token account (none
       * is there yet): the treasury pays that account's rent in SOL (about 0.002), and its owner can close it and keep
       * the rent, so without a fee every payout to a fresh address would cost the treasury SOL. Set it to what the
       * rent is worth in tokens; 0 makes the treasury pay it.
       */
      token_account_fee: zDecimal().default('0.5'),
      /**
       * How many withdrawals one wallet may make in any hour (the hour before each request), counted from its records
       * across every instance; more are refused (429 RATE_LIMITED, Retry-After) with nothing debited. Each costs the
       * treasury a transaction fee in SOL whatever its amount. 0: no limit.
       */
      withdrawals_per_hour: zInt(0, 1_000_000).default(30),
      /**
       * How far a usage report may be dated ahead of billing's clock, or before its session started, and still be
       * applied: a provider daemon's clock is never quite billing's. Beyond it the report is refused (400, or a NATS
       * message terminated), so a wrong clock never sets the session's last usage time. A storage report's period
       * may end this far ahead of when it was sent, too.
       */
      max_clock_skew: zDuration().default('5m'),
      /**
       * How long a session's workload may take from the session's start to running (the daemon picking it up,
       * preparing its sandbox); past it the session ends, nothing billed (`workload_not_started`, the machine's
       * fault; one that took GPUs back pays its first minute).
       */
      workload_start_timeout: zDuration().default('5m'),
      /**
       * How long a preempted interruptible session's workload has between its notice (SIGTERM and the notice file)
       * and SIGKILL: its daemon is told the deadline, which the provider's own settings cannot shorten. At least 5 s.
       */
      preemption_grace: zDuration()
        .refine((d) => (parseDuration(d) ?? 5000) >= 5000, 'at least 5s: a workload needs time to save its work')
        .refine(
          (d) => (parseDuration(d) ?? 0) <= 120_000,
          "at most 2m: the winner's workload waits for it (and must run within workload_start_timeout)",
        )
        .default('30s'),
      /**
       * How long after a workload ended its daemon may still upload its logs and outputs (grants for them are
       * issued until then, each valid 10 minutes at most and never past it).
       */
      workload_upload_window: zDuration().default('15m'),
      /**
       * Without NATS: how often billing asks the provider registry whether the machines with running sessions are
       * still delivering (offline, error or gone: their sessions end); 0 turns it off. With NATS, the registry's
       * status events do it.
       */
      provider_check_interval: zDuration().default('30s'),
      /**
       * With NATS: how often billing asks the same as a backstop to the registry's events (0 turns it off). An event
       * handled before a session that was starting at that moment committed ends nothing, and would leave that
       * session running on a machine gone into maintenance, or gone.
       */
      provider_recheck_interval: zDuration().default('5m'),
      /** How often pending withdrawals and payouts are reconciled with the chain (0 = only at start-up). */
      reconcile_interval: zDuration().default('30s'),
      /**
       * How often the treasury's balance on chain is compared with what the ledger owes (domain/reserves/), for the
       * metrics, the log and the pause of withdrawals and payouts a gap brings; 0: only when an admin asks (GET
       * /api/v1/billing/reserves) and before each payout. A minute at most, so that a gap stops money out and raises
       * the alert within minutes.
       */
      reserve_check_interval: zDuration().default('1m'),
    })
    .superRefine((b, ctx) => {
      // A payout of the minimum to a fresh address must leave something to send once the fee is withheld.
      if (new Decimal(b.minimum_payout).lte(b.token_account_fee)) {
        ctx.addIssue({
          code: 'custom',
          path: ['minimum_payout'],
          message: `must be more than token_account_fee (${b.token_account_fee}), which a payout to a fresh address withholds`,
        });
      }
    })
    .prefault({}),
  /**
   * Where billing asks who owns a provider machine: the provider registry, called with billing's own machine client
   * (a `service` client of the auth service: `client_id` and `client_secret`, or `credentials_file`, a JSON file
   * `{client_id, client_secret}` as auth's bootstrap writes it, read when first needed). An empty `url` leaves the
   * registry out: provider accounts (provider wallets, rates) are then managed by admins and services only.
   */
  provider_registry: z
    .object({
      url: z.string().default(''),
      ...machineClientShape(),
      /** Time limit of one call (two more attempts follow a failure that may be retried). */
      timeout: zDuration().default('3s'),
      /** How long a provider's owner is remembered. */
      cache_ttl: zDuration().default('60s'),
    })
    .prefault({}),
  /**
   * Where workloads' files live: the storage service, asked (with billing's machine client of `provider_registry`)
   * whether a renter may read a workload's inputs and write its output prefix when its session starts, and for
   * presigned URLs of exactly those objects when the machine's daemon needs them (`POST /grants`). An empty `url`
   * leaves it out: a workload may then name no inputs nor output, and its logs stay on its machine.
   */
  storage: z
    .object({
      url: z.string().default(''),
      /** Time limit of one call (two more attempts follow a failure that may be retried). */
      timeout: zDuration().default('5s'),
    })
    .prefault({}),
  /**
   * Renters reaching their running workloads (`gpu exec`, `gpu shell`: domain/reach/): machines' daemons hold an
   * outbound WebSocket here, and a renter's stream is relayed to the one of its session's machine.
   */
  reach: z
    .object({
      /**
       * Where the other billing instances reach this one (`http://<pod IP>:8003`): a renter's stream that arrives
       * at an instance not holding its machine's connection is passed to the one that does. Empty:
       * `http://<server.host, or 127.0.0.1 for 0.0.0.0>:<port>`.
       */
      advertise_url: z.union([z.literal(''), z.string().url()]).default(''),
      /** The most streams one session has open at once (more: 429 TOO_MANY_STREAMS). */
      max_streams_per_session: zInt(1, 1000).default(32),
      /**
       * The most MiB a second one session's streams carry together, both ways (0: no limit): past it they are
       * slowed, never cut (their sources wait).
       */
      max_mib_per_second: zInt(0, 100_000).default(128),
      /** How often the streams' sessions are checked: a stream ends at most this long after its session. */
      check_interval: zDuration().default('500ms'),
      /**
       * How often a renter's WebSocket stream is pinged: one from whose renter nothing came for two of them is ended
       * (a renter gone without a word frees the stream's slot and its program within three intervals; common's
       * keepPinging).
       */
      ping_interval: zDurationAtLeast('1s').default('30s'),
      /**
       * The platform's SSH host key for renters' `ssh` (PEM: ECDSA, Ed25519 or RSA; a secret). Empty: one is made
       * once and kept in the database, so every instance serves the same.
       */
      ssh_host_key: z.string().default(''),
      /**
       * Where browsers open workloads' HTTP ports, each at an origin of its own (`gpu open`): a URL whose host begins
       * with `ports.` (`https://ports.example.com`; a wildcard DNS name and certificate for `*.ports.example.com`),
       * and a link is `<scheme>://<session>-<port>.ports.example.com/`. Empty: no links are made (409
       * PORT_LINKS_OFF); the gateways pass such hosts to billing whatever this says.
       */
      ports_url: z
        .union([
          z.literal(''),
          z
            .string()
            .url()
            .refine((u) => /^https?:\/\/ports\.[^/]+\/?$/i.test(u), {
              message: 'a URL whose host begins with `ports.` and that has no path (`https://ports.example.com`)',
            }),
        ])
        .default(''),
      /** How long a browser that opened a port link may use it (its cookie), unless its session ends first. */
      port_grant_ttl: zDuration().default('8h'),
    })
    .prefault({}),
  /**
   * Renters' jobs (domain/jobs/): billing's placer finds each queued job the cheapest offer that meets its terms,
   * starts its session, follows it, and queues it again when its machine fails it.
   */
  jobs: z
    .object({
      /** How often queued jobs are placed and running ones followed (0: this instance places none). */
      place_interval: zDuration().default('1s'),
      /** How long one placement may take before another placer takes the job over (a placer killed mid-way). */
      placing_timeout: zDuration().default('60s'),
      /** How long a job that no offer fits waits before it is tried again. */
      retry_interval: zDuration().default('2s'),
      /**
       * How long a job whose attempt ended on a machine still there waits, before it is placed again, for that
       * attempt's final checkpoint (its daemon keeps the checkpoint directory after the workload's end): placed
       * as soon as it is said whole, or after this without it.
       */
      final_checkpoint_wait: zDuration().default('60s'),
      /** The attempts a job gets unless its renter says (`max_attempts`). */
      default_max_attempts: zInt(1, 100).default(3),
      /** The most jobs a renter has open (not ended) at once: another submit is 409 TOO_MANY_OPEN_JOBS. */
      max_open_per_renter: zInt(1, 1_000_000).default(1000),
    })
    .prefault({}),
  /**
   * The shared messaging section: `nats_url` (empty: no events, no NATS usage consumer), `stream` (the JetStream
   * stream of billing's events), `subjects.events` (prefix of payment and session events: `<prefix>.<kind>`) and
   * `subjects.usage` (prefix of usage updates into billing: `<prefix>.<session_id>`), `subjects.provider_status`
   * (the registry's provider status changes, read to end an offline provider's sessions), `subjects.storage_usage`
   * (prefix of the storage service's usage reports: `<prefix>.<user_id>`), `subjects.usage_reports` (prefix of the
   * usage reports daemons holding a NATS user of their own send as requests, `<prefix>.<owner>.<client>.<provider>`:
   * with `subject_identity` only; never captured by a stream); `enabled: false` turns messaging off with a URL set.
   */
  messaging: z
    .object({
      ...messagingShape({
        stream: 'BILLING_EVENTS',
        subjects: {
          events: 'billing.events',
          usage: 'billing.usage',
          provider_status: 'registry.providers.status',
          storage_usage: 'storage.usage',
          usage_reports: 'billing.usage-reports',
        },
      }),
      enabled: zBool().default(true),
      /** Billing's durable consumer on it: ends the sessions of providers that go offline or into error. */
      provider_status_consumer: z.string().min(1).default('billing-provider-status'),
      /** The JetStream stream capturing `<subjects.usage>.>` (daemons publish into it; billing creates it too). */
      usage_stream: z.string().min(1).default('BILLING_USAGE'),
      /** Billing's durable consumer of usage updates on it, one consumer shared by every instance. */
      usage_consumer: z.string().min(1).default('billing-usage'),
      /**
       * How long a usage message handed to an instance waits for its acknowledgement before it is delivered again
       * (to any instance): what an instance that dies holding messages delays them by.
       */
      usage_ack_wait: zDuration().default('30s'),
      /** The JetStream stream capturing `<subjects.storage_usage>.>` (the storage service publishes into it). */
      storage_usage_stream: z.string().min(1).default('STORAGE_USAGE'),
      /** Billing's durable consumer of the storage service's usage reports on it. */
      storage_usage_consumer: z.string().min(1).default('billing-storage-usage'),
      /**
       * Take usage reports on `<usage_reports>.<owner ID>.<client ID>.<provider ID>` as sent by that owner's daemon
       * client, with no token: only for a NATS server in operator mode where daemons hold the users auth issues.
       */
      ...subjectIdentityShape(),
    })
    .superRefine(checkSubjectIdentity)
    .superRefine((m, ctx) => {
      // A stream acknowledges onto whatever reply subject a publisher names: daemons' requests stay out of streams.
      const reports = m.subjects.usage_reports;
      for (const captured of [m.subjects.usage, m.subjects.events]) {
        if (reports === captured || reports.startsWith(`${captured}.`)) {
          ctx.addIssue({
            code: 'custom',
            path: ['subjects', 'usage_reports'],
            message: `must not be under ${captured}, which a stream captures`,
          });
        }
      }
    })
    .prefault({}),
});

export type BillingConfig = z.infer<typeof billingConfigSchema>;

/** Loads the optional configuration file (BILLING_CONFIG_FILE), then the environment. */
export function loadBillingConfig(env: NodeJS.ProcessEnv = process.env): BillingConfig {
  return loadConfig({
    schema: billingConfigSchema,
    envPrefix: 'BILLING',
    file: env.BILLING_CONFIG_FILE,
    env,
    aliases: {
      ...baseEnvAliases,
      ...databaseEnvAliases,
      ...auditDatabaseEnvAliases,
      ...messagingEnvAliases,
      SOLANA_RPC_URL: 'blockchain.rpc_url',
      SOLANA_WS_URL: 'blockchain.ws_url',
      TOKEN_MINT: 'blockchain.token_mint',
      TREASURY_ADDRESS: 'blockchain.treasury_address',
      TREASURY_KEYPAIR_PATH: 'blockchain.private_key_path',
      PROVIDER_REGISTRY_URL: 'provider_registry.url',
      STORAGE_URL: 'storage.url',
      AUTH_URL: 'provider_registry.auth_url',
      BILLING_CLIENT_CREDENTIALS_FILE: 'provider_registry.credentials_file',
    },
  });
}
