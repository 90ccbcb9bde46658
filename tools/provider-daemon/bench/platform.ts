/**
 * The platform of the daemon's benchmarks (bench/reach.ts, bench/jobs.ts), each part where it runs in production: the
 * auth service and the provider registry listening in this process (they only sign and check tokens, and answer the
 * market, here), billing as its own process (`services/billing/src/server.ts`, the service's real entry, on the test
 * PostgreSQL) and each provider daemon as its own (`src/main.ts`, as root: its workloads in the real bubblewrap
 * sandbox) on a simulated 8-GPU machine. Every child is stopped with this process (scripts/lib/lifeline.ts), however it
 * ends.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { clientCredentials } from '@gpu/client';
import { type App, createLogger, type Database, migrateToLatest, openDatabase, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { LIFELINE_FD, lifelineEnv } from '@gpu/common/lifeline';
import { createTestDatabase, freePort, testEnv } from '@gpu/common/testing';
import type { Kysely } from 'kysely';
import { buildApp as buildAuth } from '../../../services/auth/src/app.ts';
import { authConfigSchema } from '../../../services/auth/src/config.ts';
import { createAuthContext } from '../../../services/auth/src/context-factory.ts';
import { migrations as authMigrations } from '../../../services/auth/src/db/migrations/index.ts';
import type { AuthDatabase } from '../../../services/auth/src/db/schema.ts';
import { insertUser } from '../../../services/auth/src/db/user-repository.ts';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { billingConfigSchema } from '../../../services/billing/src/config.ts';
import { openBillingDatabase } from '../../../services/billing/src/db/open.ts';
import type { BillingDB } from '../../../services/billing/src/db/schema.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import { postTransfers } from '../../../services/billing/src/domain/ledger/ledger.ts';
import { Dec } from '../../../services/billing/src/domain/ledger/money.ts';
import { type Harness, startHarness } from '../../../services/provider-registry/test/helpers.ts';

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url));
const LIFELINE = join(repoRoot, 'scripts/lib/lifeline.ts');
const PASSWORD = 'correct horse battery staple';

/** A Node program of the platform in a process of its own. */
export interface NodeProcess {
  child: ChildProcess;
  pid: number;
  /** What it wrote so far (its last 20,000 characters), for a failure's message. */
  output(): string;
}

/**
 * Starts `node --import tsx <script>` with the lifeline preloaded (it stops as on SIGTERM when this process is gone),
 * leading a process group of its own, configured by `env` alone (none of this shell's settings, which a service reads
 * as its own: `PORT`, `LOG_LEVEL`, ...). Its inspector is closed; SIGUSR1 opens it on a port of its own
 * (bench/reach-profile.ts).
 */
function startNode(script: string, cwd: string, env: NodeJS.ProcessEnv): NodeProcess {
  const args = ['--inspect-port=127.0.0.1:0', '--import', 'tsx', '--import', LIFELINE, script];
  const { PATH, HOME, TMPDIR } = process.env;
  const child = spawn(process.execPath, args, {
    cwd,
    env: { PATH, HOME, ...(TMPDIR ? { TMPDIR } : {}), ...env, ...lifelineEnv(5_000) },
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdio[LIFELINE_FD]?.on('error', () => {});
  let out = '';
  const keep = (d: Buffer) => {
    out = `${out}${d}`.slice(-20_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  if (!child.pid) throw new Error(`${script} did not start`);
  return { child, pid: child.pid, output: () => out };
}

/** Stops a child as a supervisor would: SIGTERM, SIGKILL after `graceMs`. */
async function stopNode(p: NodeProcess, graceMs = 10_000): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise((resolve) => p.child.once('exit', resolve));
  p.child.kill('SIGTERM');
  const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Polls `read` until it gives a value (not undefined; a failure is tried again), or throws with `what` and the last
 * failure after `ms`. `everyMs` between tries.
 */
export async function until<T>(
  what: () => string,
  read: () => Promise<T | undefined>,
  ms = 60_000,
  everyMs = 100,
): Promise<T> {
  const end = Date.now() + ms;
  let failure = '';
  for (;;) {
    const v = await read().catch((err: Error) => {
      failure = err.message;
      return undefined;
    });
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out: ${what()}${failure ? `\nlast failure: ${failure}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${url}: ${res.status} ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/** A renter of the platform: signed up at auth, with a wallet at billing funded through the ledger. */
export interface BenchRenter {
  userId: string;
  /** Its `authorization` header. */
  headers: Record<string, string>;
  walletId: string;
}

/** A provider's machine: its daemon in a process of its own. */
export interface BenchMachine {
  daemon: NodeProcess;
  providerId: string;
}

export interface BenchPlatform {
  dir: string;
  authUrl: string;
  registry: Harness;
  registryUrl: string;
  billingUrl: string;
  billing: NodeProcess;
  /** Billing's database, opened anew (the ledger funded directly; rows counted where a benchmark needs them). */
  billingDatabase(): Promise<Database<BillingDB>>;
  renter(funds?: string): Promise<BenchRenter>;
  /** A machine of 8 simulated GPUs of `gpuName` (an H100 by default), attached. */
  machine(opts?: { gpuName?: string }): Promise<BenchMachine>;
  /** A daemon client of a new provider's: its credentials. */
  daemonClient(): Promise<{ clientId: string; secret: string }>;
  /** The `authorization` header of a platform service's client (the registry's records and market, as billing reads them). */
  serviceHeaders(): Promise<Record<string, string>>;
  /** Runs `close` with the platform (last added, first run). */
  onClose(close: () => Promise<void>): void;
  close(): Promise<void>;
}

/**
 * Starts the platform: `name` names its databases; `billing` settings are merged into billing's; `registry` runs its
 * offline sweep and publishes its status events on the tests' NATS, which billing then reads (as in production).
 */
export async function startPlatform(
  name: string,
  opts: { billing?: Record<string, unknown>; registryEvents?: boolean } = {},
): Promise<BenchPlatform> {
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  // The run directory's parents let the workloads' users through, listing nothing.
  chmodSync(dir, 0o711);
  const closers: (() => Promise<void>)[] = [
    async () => {
      // A daemon killed with SIGKILL leaves its workloads' filesystems mounted (its next life would take them up).
      for (const line of readFileSync('/proc/self/mounts', 'utf8').split('\n')) {
        const at = line.split(' ')[1];
        if (at?.startsWith(`${dir}/`)) spawnSync('umount', ['-l', at]);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  ];
  const close = async () => {
    for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    // Auth: EdDSA, its JWKS trusted by the registry and billing; renters' tokens last the whole run.
    const authDb = await createTestDatabase(`${name}_auth`);
    const authDatabase = await openDatabase<AuthDatabase>({ url: authDb.url, poolSize: 5 });
    closers.push(async () => {
      await authDatabase.close();
      await authDb.drop();
    });
    await migrateToLatest(authDatabase.db as Kysely<unknown>, 'auth-service', authMigrations);
    const authConfig = authConfigSchema.parse({
      environment: 'test',
      log_level: 'warn',
      jwt: { algorithm: 'EdDSA', access_token_expire_minutes: 120 },
      rate_limit: { enabled: false },
    });
    const logger = createLogger({ service: 'auth-service', instanceId: name, level: 'warn' });
    const authCtx = await createAuthContext(authConfig, logger, authDatabase.db);
    const auth: App = await buildAuth(authCtx);
    const authUrl = await auth.listen({ host: '127.0.0.1', port: 0 });
    closers.push(async () => {
      await auth.close();
      await authCtx.mailer.close();
    });
    const access = {
      jwks_url: `${authUrl}/.well-known/jwks.json`,
      issuer: authConfig.jwt.issuer,
      audience: authConfig.jwt.audience,
    };

    const events = opts.registryEvents === true;
    // With events, the registry also reads billing's statements of held GPUs (`lease.held`) and rentals' ends, as in
    // production: its market then lists only what billing has free.
    const registry = await startHarness({
      nats: events,
      sweeper: events,
      consumeSessionEvents: events,
      config: { access },
    });
    const registryUrl = await registry.app.listen({ host: '127.0.0.1', port: 0 });
    closers.push(() => registry.close());

    // Billing, its own process: the service's entry, configured by a file.
    const billingDb = await createTestDatabase(`${name}_billing`);
    closers.push(() => billingDb.drop());
    const service = await createClient(authCtx, UNCHECKED_PRINCIPAL, {
      name: `billing-${randomUUID()}`,
      role: 'service',
    });
    const billingPort = await freePort();
    const billingSettings = {
      log_level: 'warn',
      server: { host: '127.0.0.1', port: billingPort },
      access,
      database: { url: billingDb.url, pool_size: 10 },
      blockchain: { localnet_file: '' },
      messaging: events
        ? {
            nats_url: testEnv.natsUrl,
            nats_credentials: testEnv.natsCredentials,
            stream: `BENCH_BILLING_${randomUUID().slice(0, 8)}`,
            subjects: { provider_status: registry.subject, events: registry.config.messaging.subjects.billing_events },
            provider_status_consumer: `billing-${name}-${randomUUID().slice(0, 8)}`,
          }
        : { nats_url: '' },
      provider_registry: {
        url: registryUrl,
        auth_url: authUrl,
        client_id: service.client.id,
        client_secret: service.secret,
      },
      ...opts.billing,
    };
    const billingFile = join(dir, 'billing.json');
    writeFileSync(billingFile, JSON.stringify(billingSettings));
    const billing = startNode('src/server.ts', join(repoRoot, 'services/billing'), {
      BILLING_CONFIG_FILE: billingFile,
    });
    closers.push(() => stopNode(billing));
    const billingUrl = `http://127.0.0.1:${billingPort}`;
    await until(
      () => `billing did not answer /health:\n${billing.output()}`,
      async () => ((await fetch(`${billingUrl}/health`)).ok ? true : undefined),
    );

    const daemonClient = async () => {
      const owner = await insertUser(authDatabase.db, {
        email: `${name}-provider-${randomUUID()}@example.com`,
        password_hash: 'x',
        roles: ['provider'],
      });
      const made = await createClient(authCtx, UNCHECKED_PRINCIPAL, {
        name: `daemon-${randomUUID()}`,
        role: 'daemon',
        owner_id: owner.id,
      });
      return { clientId: made.client.id, secret: made.secret };
    };

    const tokens = clientCredentials({ authUrl, clientId: service.client.id, clientSecret: service.secret });
    return {
      serviceHeaders: async () => ({ authorization: `Bearer ${await tokens.get()}` }),
      dir,
      authUrl,
      registry,
      registryUrl,
      billingUrl,
      billing,
      billingDatabase: () =>
        openBillingDatabase(billingConfigSchema.parse({ ...billingSettings, log_level: 'silent' })),
      daemonClient,
      onClose: (c) => closers.push(c),
      close,
      async renter(funds = '100000') {
        const email = `${name}-${randomUUID()}@example.com`;
        const registered = await post(`${authUrl}/api/v1/auth/register`, {
          email,
          password: PASSWORD,
          roles: ['renter'],
        });
        const userId = (registered.user as { id: string }).id;
        const login = await post(`${authUrl}/api/v1/auth/login`, { email, password: PASSWORD });
        const headers = { authorization: `Bearer ${login.access_token as string}` };
        const wallet = await post(
          `${billingUrl}/api/v1/wallet`,
          { owner_type: 'user', owner_id: userId, solana_address: base58Encode(randomBytes(32)) },
          headers,
        );
        const ledger = await openBillingDatabase(
          billingConfigSchema.parse({ ...billingSettings, log_level: 'silent' }),
        );
        await ledger.db.transaction().execute((trx) =>
          postTransfers(trx, [
            {
              debit: { system: 'chain_incoming' },
              credit: { wallet: wallet.id as string, kind: 'available' },
              amount: new Dec(funds),
              code: 'bench_credit',
            },
          ]),
        );
        await ledger.close();
        return { userId, headers, walletId: wallet.id as string };
      },
      async machine(machineOpts = {}) {
        const client = await daemonClient();
        const id = randomUUID().slice(0, 8);
        const stateFile = join(dir, `daemon-state-${id}.json`);
        const daemonFile = join(dir, `daemon-${id}.json`);
        writeFileSync(
          daemonFile,
          JSON.stringify({
            log_level: 'warn',
            auth_url: authUrl,
            registry_url: registryUrl,
            billing_url: billingUrl,
            credentials: { client_id: client.clientId, client_secret: client.secret },
            state_file: stateFile,
            provider: { name: `${name}-${id}` },
            gpu: {
              source: 'simulated',
              simulated_gpus: Array.from({ length: 8 }, () => ({
                name: machineOpts.gpuName ?? 'NVIDIA H100 80GB HBM3',
                memory_total_mib: 81559,
              })),
            },
            workloads: { run_dir: join(dir, `run-${id}`), disk_mb: 64, memory_mb: 1024 },
          }),
        );
        const daemon = startNode('src/main.ts', join(repoRoot, 'tools/provider-daemon'), {
          DAEMON_CONFIG_FILE: daemonFile,
        });
        closers.push(() => stopNode(daemon, 15_000));
        const providerId = await until(
          () => `the daemon did not attach:\n${daemon.output()}`,
          async () =>
            existsSync(stateFile)
              ? (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id
              : undefined,
        );
        return { daemon, providerId };
      },
    };
  } catch (err) {
    await close();
    throw err;
  }
}
