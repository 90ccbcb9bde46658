/**
 * The platform of the reach benchmark (bench/reach.ts), each part where it runs in production: the auth service and
 * the provider registry listening in this process (they only sign and check tokens here), billing as its own process
 * (`services/billing/src/server.ts`, the service's real entry, on the test PostgreSQL) and the provider daemon as its
 * own (`src/main.ts`, as root: its workloads in the real bubblewrap sandbox) on a simulated 8-GPU machine, dialling
 * billing's relay. A renter with a funded wallet rents one GPU for an idle workload; `exec` runs programs in it.
 * Both children are stopped with this process (scripts/lib/lifeline.ts), however it ends.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type App, createLogger, migrateToLatest, openDatabase, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { createTestDatabase, freePort } from '@gpu/common/testing';
import type { Kysely } from 'kysely';
import WebSocket from 'ws';
import { LIFELINE_FD, lifelineEnv } from '../../../scripts/lib/supervisor.ts';
import { buildApp as buildAuth } from '../../../services/auth/src/app.ts';
import { authConfigSchema } from '../../../services/auth/src/config.ts';
import { createAuthContext } from '../../../services/auth/src/context-factory.ts';
import { migrations as authMigrations } from '../../../services/auth/src/db/migrations/index.ts';
import type { AuthDatabase } from '../../../services/auth/src/db/schema.ts';
import { insertUser } from '../../../services/auth/src/db/user-repository.ts';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { billingConfigSchema } from '../../../services/billing/src/config.ts';
import { openBillingDatabase } from '../../../services/billing/src/db/open.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import { postTransfers } from '../../../services/billing/src/domain/ledger/ledger.ts';
import { Dec } from '../../../services/billing/src/domain/ledger/money.ts';
import { startHarness } from '../../../services/provider-registry/test/helpers.ts';

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
 * failure after `ms`.
 */
async function until<T>(what: () => string, read: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  let failure = '';
  for (;;) {
    const v = await read().catch((err: Error) => {
      failure = err.message;
      return undefined;
    });
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out: ${what()}${failure ? `\nlast failure: ${failure}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface ReachPlatform {
  billingUrl: string;
  billing: NodeProcess;
  daemon: NodeProcess;
  /** The renter's `authorization` header. */
  headers: Record<string, string>;
  /** The renter's session, its idle workload running. */
  sessionId: string;
  /** Starts `argv` in the workload (an exec stream left open while it runs): what it printed first. */
  serve(argv: string[]): Promise<{ firstLine: string; stop(): void }>;
  close(): Promise<void>;
}

export async function startReachPlatform(): Promise<ReachPlatform> {
  const dir = mkdtempSync(join(tmpdir(), 'reach-bench-'));
  // The run directory's parents let the workloads' users through, listing nothing.
  chmodSync(dir, 0o711);
  const closers: (() => Promise<void>)[] = [async () => rmSync(dir, { recursive: true, force: true })];
  const close = async () => {
    for (const c of closers.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    // Auth: EdDSA, its JWKS trusted by the registry and billing; renters' tokens last the whole run.
    const authDb = await createTestDatabase('reach_bench_auth');
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
    const logger = createLogger({ service: 'auth-service', instanceId: 'reach-bench', level: 'warn' });
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

    const registry = await startHarness({ nats: false, config: { access } });
    const registryUrl = await registry.app.listen({ host: '127.0.0.1', port: 0 });
    closers.push(() => registry.close());

    // Billing, its own process: the service's entry, configured by a file.
    const billingDb = await createTestDatabase('reach_bench_billing');
    closers.push(() => billingDb.drop());
    const service = await createClient(authCtx, UNCHECKED_PRINCIPAL, {
      name: `billing-${randomUUID()}`,
      role: 'service',
    });
    const billingPort = await freePort();
    const billingSettings = {
      log_level: 'warn',
      server: { host: '127.0.0.1', port: billingPort },
      registry: { enabled: false },
      access,
      database: { url: billingDb.url, pool_size: 10 },
      blockchain: { localnet_file: '' },
      messaging: { nats_url: '' },
      provider_registry: {
        url: registryUrl,
        auth_url: authUrl,
        client_id: service.client.id,
        client_secret: service.secret,
      },
    };
    const billingFile = join(dir, 'billing.json');
    writeFileSync(billingFile, JSON.stringify(billingSettings));
    const billingDir = join(repoRoot, 'services/billing');
    const billing = startNode('src/server.ts', billingDir, { BILLING_CONFIG_FILE: billingFile });
    closers.push(() => stopNode(billing));
    const billingUrl = `http://127.0.0.1:${billingPort}`;
    await until(
      () => `billing did not answer /health:\n${billing.output()}`,
      async () => ((await fetch(`${billingUrl}/health`)).ok ? true : undefined),
    );

    // The renter: signed up at auth, a wallet at billing, funded through the ledger.
    const email = `reach-bench-${randomUUID()}@example.com`;
    const registered = await post(`${authUrl}/api/v1/auth/register`, { email, password: PASSWORD, roles: ['renter'] });
    const userId = (registered.user as { id: string }).id;
    const login = await post(`${authUrl}/api/v1/auth/login`, { email, password: PASSWORD });
    const headers = { authorization: `Bearer ${login.access_token as string}` };
    const wallet = await post(
      `${billingUrl}/api/v1/wallet`,
      { owner_type: 'user', owner_id: userId, solana_address: base58Encode(randomBytes(32)) },
      headers,
    );
    const ledger = await openBillingDatabase(billingConfigSchema.parse({ ...billingSettings, log_level: 'silent' }));
    await ledger.db.transaction().execute((trx) =>
      postTransfers(trx, [
        {
          debit: { system: 'chain_incoming' },
          credit: { wallet: wallet.id as string, kind: 'available' },
          amount: new Dec('100000'),
          code: 'bench_credit',
        },
      ]),
    );
    await ledger.close();

    // The provider's machine: its daemon, its own process, with a daemon client of the provider's.
    const owner = await insertUser(authDatabase.db, {
      email: `reach-bench-provider-${randomUUID()}@example.com`,
      password_hash: 'x',
      roles: ['provider'],
    });
    const daemonClient = await createClient(authCtx, UNCHECKED_PRINCIPAL, {
      name: `daemon-${randomUUID()}`,
      role: 'daemon',
      owner_id: owner.id,
    });
    const stateFile = join(dir, 'daemon-state.json');
    const daemonFile = join(dir, 'daemon.json');
    writeFileSync(
      daemonFile,
      JSON.stringify({
        log_level: 'warn',
        auth_url: authUrl,
        registry_url: registryUrl,
        billing_url: billingUrl,
        credentials: { client_id: daemonClient.client.id, client_secret: daemonClient.secret },
        state_file: stateFile,
        provider: { name: `reach-bench-${randomUUID().slice(0, 8)}` },
        gpu: {
          source: 'simulated',
          simulated_gpus: Array.from({ length: 8 }, () => ({
            name: 'NVIDIA H100 80GB HBM3',
            memory_total_mib: 81559,
          })),
        },
        workloads: { run_dir: join(dir, 'run'), disk_mb: 64, memory_mb: 1024 },
      }),
    );
    const daemonDir = join(repoRoot, 'tools/provider-daemon');
    const daemon = startNode('src/main.ts', daemonDir, { DAEMON_CONFIG_FILE: daemonFile });
    closers.push(() => stopNode(daemon, 15_000));
    const providerId = await until(
      () => `the daemon did not attach:\n${daemon.output()}`,
      async () =>
        existsSync(stateFile)
          ? (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id
          : undefined,
    );

    // One GPU for an idle workload, running once the daemon's runner started it.
    const started = await post(
      `${billingUrl}/api/v1/billing/start-session`,
      {
        user_id: userId,
        wallet_id: wallet.id,
        provider_id: providerId,
        job_id: randomUUID(),
        gpu_model: 'H100',
        gpu_count: 1,
        requested_vram_mb: 0,
        estimated_power_w: 0,
        accepted_hourly_rate: '100',
        workload: { idle: true, max_runtime_seconds: 24 * 3600 },
      },
      headers,
    );
    const sessionId = (started.session as { id: string }).id;
    closers.push(async () => {
      await post(`${billingUrl}/api/v1/billing/end-session`, { session_id: sessionId }, headers);
    });
    await until(
      () => `the workload did not start:\n${daemon.output()}`,
      async () => {
        const res = await fetch(`${billingUrl}/api/v1/billing/sessions/${sessionId}/workload`, { headers });
        const w = (await res.json()) as { state?: string };
        if (w.state && ['exited', 'failed', 'stopped'].includes(w.state)) throw new Error(`workload ${w.state}`);
        return w.state === 'running' ? true : undefined;
      },
    );

    const platform: ReachPlatform = {
      billingUrl,
      billing,
      daemon,
      headers,
      sessionId,
      async serve(argv) {
        // The daemon's connection to the relay may still be on its way: retried while billing says so.
        const opened = await until(
          () => `${argv[0]} did not start in the workload:\n${daemon.output()}`,
          () => execStream(billingUrl, headers, sessionId, argv),
        );
        closers.push(async () => opened.stop());
        return opened;
      },
      close,
    };
    return platform;
  } catch (err) {
    await close();
    throw err;
  }
}

/** Starts a program in the workload and resolves with its first line of output (undefined: refused, try again). */
function execStream(
  billingUrl: string,
  headers: Record<string, string>,
  sessionId: string,
  argv: string[],
): Promise<{ firstLine: string; stop(): void } | undefined> {
  const q = new URLSearchParams();
  for (const a of argv) q.append('command', a);
  const ws = new WebSocket(
    `${billingUrl.replace(/^http/, 'ws')}/api/v1/billing/sessions/${sessionId}/exec?${q}`,
    ['v5.channel.k8s.io'],
    { headers },
  );
  return new Promise((resolve, reject) => {
    let out = '';
    ws.on('message', (d: Buffer) => {
      if (d[0] === 1) out += String(d.subarray(1));
      if (d[0] === 2) process.stderr.write(d.subarray(1));
      if (out.includes('\n')) resolve({ firstLine: out.slice(0, out.indexOf('\n')), stop: () => ws.close() });
    });
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      // 409 DAEMON_NOT_CONNECTED while the daemon dials; anything else is a failure.
      if (res.statusCode === 409 || res.statusCode === 503) resolve(undefined);
      else reject(new Error(`exec answered ${res.statusCode}`));
    });
    ws.once('close', () => reject(new Error(`${argv[0]} ended in the workload: ${out}`)));
    ws.once('error', reject);
  });
}

async function post(
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
