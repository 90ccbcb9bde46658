/**
 * The daemon's configuration, loaded like every service's (`@gpu/common`'s loader): defaults, then the YAML file
 * named by `DAEMON_CONFIG_FILE`, then `DAEMON__SECTION__KEY` variables and the plain names below.
 */
import os from 'node:os';
import { loadConfig, zDuration, zDurationAtLeast, zInt } from '@gpu/common';
import { z } from 'zod';

/** The least disk a workload may be given, in MB (`workloads.disk_mb`'s least, and the least of a disk's share). */
export const MIN_DISK_MB = 16;

/** A GPU of a simulated machine: what nvidia-smi would report for it. An explicit configuration, never a fallback. */
const simulatedGpu = z.object({
  name: z.string().min(1),
  memory_total_mib: zInt(1),
  driver_version: z.string().min(1).default('simulated'),
  compute_capability: z.string().nullable().default(null),
  power_limit_w: zInt(1).nullable().default(null),
  /** The metrics its heartbeats report (a simulated machine reports what it is told). */
  utilization_gpu: zInt(0, 100).default(0),
  utilization_memory: zInt(0, 100).default(0),
  temperature: zInt(0, 255).nullable().default(null),
  power_draw_w: zInt(0).nullable().default(null),
});

export const daemonConfigSchema = z
  .object({
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** The platform's one origin, the gateway (`pnpm start`'s by default): every service's paths behind it. */
    platform_url: z.string().url().default('http://127.0.0.1:8080'),
    /** A service's own address instead of the gateway's (empty: `platform_url`). */
    auth_url: z.union([z.literal(''), z.string().url()]).default(''),
    registry_url: z.union([z.literal(''), z.string().url()]).default(''),
    billing_url: z.union([z.literal(''), z.string().url()]).default(''),
    /** NATS for usage reports (JetStream, acknowledged) and heartbeats (requests); empty: both go over HTTP. */
    nats_url: z.string().default(''),
    /**
     * A `.creds` file (user JWT and seed) for a NATS server in operator mode; empty: the daemon asks auth for a NATS
     * user of its own (nats-user.ts), or connects without credentials where auth issues none.
     */
    nats_credentials: z.string().default(''),
    /**
     * Subject prefix of heartbeats over NATS: `<heartbeat_subject>.<provider ID>` (the registry's
     * `messaging.subjects.heartbeats`); with `nats_url` set, heartbeats go there first, over HTTP when NATS cannot
     * deliver them.
     */
    heartbeat_subject: z.string().min(1).default('registry.heartbeats'),
    /** Subject prefix of usage reports: `<usage_subject>.<session_id>` (billing's `messaging.subjects.usage`). */
    usage_subject: z.string().default('billing.usage'),
    /**
     * With a NATS user of its own (nats-user.ts): the subject prefix of its usage requests,
     * `<usage_reports_subject>.<owner>.<client>.<provider ID>` (billing's `messaging.subjects.usage_reports`).
     */
    usage_reports_subject: z.string().min(1).default('billing.usage-reports'),
    /** The daemon's machine client (role `daemon`, made by the provider at the auth service). */
    credentials: z
      .object({
        client_id: z.string().default(''),
        client_secret: z.string().default(''),
        /** A JSON file `{client_id, client_secret}` instead (the auth service writes its clients' secrets so). */
        file: z.string().default(''),
      })
      .prefault({}),
    /** Where the daemon keeps what must survive a restart (its provider ID). */
    state_file: z.string().default('.data/provider-daemon/state.json'),
    provider: z
      .object({
        /** Unique among the owner's machines; the daemon re-attaches by it when its state file is lost. */
        name: z.string().min(1).default(os.hostname()),
        hostname: z.string().default(os.hostname()),
        ip_address: z.string().default(''),
        location: z.string().default(''),
        metadata: z.record(z.string(), z.unknown()).default({}),
      })
      .prefault({}),
    gpu: z
      .object({
        /** `nvidia-smi` reads the machine's GPUs; `simulated` reports `simulated_gpus` (machines without a GPU). */
        source: z.enum(['nvidia-smi', 'simulated']).default('nvidia-smi'),
        nvidia_smi_path: z.string().default('nvidia-smi'),
        simulated_gpus: z.array(simulatedGpu).default([]),
      })
      .prefault({}),
    /** Set it to the registry's `heartbeat_interval` (30 s by default); the registry marks a machine offline after 3. */
    heartbeat_interval: zDurationAtLeast('100ms').default('30s'),
    /**
     * Over NATS, how often a heartbeat asks the registry for an answer: one in this many (and every one that carries
     * metrics, whose loss would leave the registry behind); the rest are published, applied and answered by nobody.
     * An answer proves a registry listens (none: the daemon goes over HTTP), so keep a request within the registry's
     * offline bound: 2 (every other heartbeat) with its default 3 intervals; 1 asks every time.
     */
    heartbeat_answer_every: zInt(1, 100).default(2),
    /**
     * Renters reaching their workloads (`gpu exec`, `gpu shell`: src/reach/): the daemon holds an outbound WebSocket
     * to billing's relay and runs what renters ask in their own workload only. Off: no connection (renters hear 409
     * DAEMON_NOT_CONNECTED).
     */
    reach: z.object({ enabled: z.boolean().default(true) }).prefault({}),
    /** Renters' workloads (src/workloads/): run in a bubblewrap sandbox on exactly the leased GPUs. */
    workloads: z
      .object({
        /** Off: the daemon runs no workload (a session's workload then never runs, and ends unbilled). */
        enabled: z.boolean().default(true),
        /** Where each session's work and log directories are made (the daemon's own; 0711). */
        run_dir: z.string().default('.data/provider-daemon/workloads'),
        /** How often the daemon asks billing for new and ended sessions (how soon a workload starts and stops). */
        poll_interval: zDurationAtLeast('100ms').default('1s'),
        /**
         * With `nats_url`: billing nudges `<dispatch_subject>.<owner ID>.<provider ID>` when a workload session of the
         * machine starts or ends, and the daemon polls at once (billing's `messaging.subjects.events` + `.machine`).
         */
        dispatch_subject: z.string().min(1).default('billing.events.machine'),
        /** Between SIGTERM and SIGKILL when a workload is stopped. */
        stop_grace: zDuration().default('10s'),
        bwrap_path: z.string().default('bwrap'),
        /**
         * The kernel's limits on each sandbox's memory and processes (a control group per workload): off leaves the
         * daemon's watch alone (src/workloads/cgroups.ts).
         */
        cgroups: z.boolean().default(true),
        /** cgroup v2: the directory the daemon makes its workloads' groups in (empty: `/sys/fs/cgroup/gpu-platform`). */
        cgroup_parent: z.string().default(''),
        /**
         * Container mode (a spec with `image`): Podman's command (`podman`), empty for none (such a workload then
         * fails unbilled, `container_runtime_unavailable`). Real GPUs reach containers through CDI (`nvidia-ctk cdi
         * generate`).
         */
        container_runtime: z.string().default(''),
        /** The runtime's global flags (`[--runtime, runc, --cgroup-manager, cgroupfs]` on a host without systemd). */
        container_runtime_args: z.array(z.string()).default([]),
        /**
         * Registries named by an address or as `localhost` that renters' images may come from (`localhost`,
         * `10.0.0.5:5000`); any other such reference is refused (`image_refused`): the machine's own network and images
         * are not the renter's. Registries by name are pulled from.
         */
        allowed_registries: z.array(z.string()).default([]),
        /**
         * How long pulling a workload's image may take (while it is `preparing`, unbilled): below billing's
         * `workload_start_timeout` (5 minutes), past which the session ends anyway.
         */
        image_pull_timeout: zDurationAtLeast('1s').default('4m'),
        /** A daemon running as root runs each workload as a user of its own: `uid_base` + its slot. */
        uid_base: zInt(1000, 2 ** 31 - 65_536).default(200_000),
        processes: zInt(16, 1_000_000).default(4096),
        open_files: zInt(64, 1_048_576).default(65_536),
        memory_mb: zInt(64).default(65_536),
        /** MB of a workload's disk (its work directory and /tmp together; one file at most), as the registry holds it. */
        disk_mb: zInt(MIN_DISK_MB, 2_147_483_647).default(102_400),
        /** Files and directories on a workload's disk (its filesystem's inodes). */
        disk_files: zInt(1024, 100_000_000).default(1_000_000),
        /**
         * A filesystem of its own per workload (an ext4 image, loop-mounted: the kernel holds it to `disk_mb` and
         * `disk_files`); needs root. Off, or where none can be mounted: the work directory is watched each second.
         */
        disk_filesystem: z.boolean().default(true),
        /** Each of a workload's standard output and error kept, at most; the rest is cut (and counted). */
        log_kb: zInt(1, 1_048_576).default(10_240),
        /** How often a running workload's logs are uploaded to its renter's storage while they grow. */
        log_interval: zDurationAtLeast('100ms').default('2s'),
      })
      .prefault({}),
    /** Time limit of one request to a service. */
    request_timeout: zDurationAtLeast('100ms').default('10s'),
    /** Longest wait between attempts while a service cannot be reached. */
    max_backoff: zDurationAtLeast('1s').default('60s'),
  })
  .superRefine((c, ctx) => {
    if (c.gpu.source === 'simulated' && c.gpu.simulated_gpus.length === 0) {
      ctx.addIssue({ code: 'custom', path: ['gpu', 'simulated_gpus'], message: 'a simulated machine needs its GPUs' });
    }
  });

export type DaemonConfig = z.infer<typeof daemonConfigSchema>;

/** A service's address: its own when given, else the platform's one origin. */
function withOrigin(c: DaemonConfig): DaemonConfig {
  return {
    ...c,
    auth_url: c.auth_url || c.platform_url,
    registry_url: c.registry_url || c.platform_url,
    billing_url: c.billing_url || c.platform_url,
  };
}

export function loadDaemonConfig(env: NodeJS.ProcessEnv = process.env): DaemonConfig {
  const config = loadConfig({
    schema: daemonConfigSchema,
    envPrefix: 'DAEMON',
    file: env.DAEMON_CONFIG_FILE,
    env,
    aliases: {
      LOG_LEVEL: 'log_level',
      PLATFORM_URL: 'platform_url',
      AUTH_URL: 'auth_url',
      REGISTRY_URL: 'registry_url',
      BILLING_URL: 'billing_url',
      NATS_URL: 'nats_url',
      NATS_CREDENTIALS: 'nats_credentials',
      DAEMON_CLIENT_ID: 'credentials.client_id',
      DAEMON_CLIENT_SECRET: 'credentials.client_secret',
      DAEMON_CREDENTIALS_FILE: 'credentials.file',
      DAEMON_STATE_FILE: 'state_file',
    },
  });
  return withOrigin(config);
}
