/**
 * `pnpm start`: the whole platform on embedded defaults, with no external
 * setup. Starts an S3-compatible store (s3rver on .data/s3), a local Solana
 * chain (.data/solana) and every service that exists, all at once, each service on its contract
 * port with an embedded PGlite database under .data/<service>/ (no
 * DATABASE_URL needed). Consul registration is off; NATS is used only when
 * NATS_URL is set. Each runs under a supervisor (scripts/lib/supervisor.ts) that restarts it if it crashes.
 * The programs run as JavaScript compiled ahead (scripts/lib/build.ts), again whenever a source changed.
 * Ctrl-C (SIGINT) or SIGTERM stops everything gracefully.
 * PLATFORM_PORT_BASE moves every port (services at base+0..3 in contract order, s3rver at base+4, the Solana RPC at
 * base+5 and its WebSocket at base+6), so a second copy (a test run) can share the machine.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
// The storage service's V8 flags live in a file of their own at its package root, for this script, its benchmark and
// its start commands alike.
import { STORAGE_NODE_FLAGS } from '../services/storage/node-flags.ts';
import { compiledPath, ensureBuilt, platformPrograms } from './lib/build.ts';
import { platformDataDir, platformPorts, portOpen, repoRoot } from './lib/platform.ts';
import { type Supervised, Supervisor } from './lib/supervisor.ts';

const root = repoRoot;
// PLATFORM_DATA_DIR moves every local data folder (tests use a temporary one); PLATFORM_PORT_BASE every port.
const data = platformDataDir();
const ports = platformPorts();

/**
 * Access control is on in every service: the auth service signs with an Ed25519 key kept in the data folder (made at
 * first start), the others verify with its JWKS. The platform's own machine clients (`platform` for service-to-service
 * calls, `gateway`, `scheduler`) are created at start-up with their secrets in `<data>/auth/clients/<name>.json`, and
 * an initial admin with a password made once and kept in `<data>/auth/admin.json` (both mode 0600).
 */
const authDir = path.join(data, 'auth');
const adminFile = path.join(authDir, 'admin.json');
function initialAdmin(): { email: string; password: string } {
  if (existsSync(adminFile)) return JSON.parse(readFileSync(adminFile, 'utf8'));
  mkdirSync(authDir, { recursive: true, mode: 0o700 });
  const admin = { email: 'admin@example.com', password: randomBytes(18).toString('base64url') };
  writeFileSync(adminFile, `${JSON.stringify(admin, null, 2)}\n`, { mode: 0o600 });
  return admin;
}
const admin = initialAdmin();
const jwksUrl = `http://127.0.0.1:${ports.auth}/.well-known/jwks.json`;
/**
 * A new embedded database is a copy of an empty one made once in this folder (see @gpu/common's seedFromTemplate):
 * outside the data folder, so a fresh data folder gets one too. Like the compiled programs, a cache of the checkout.
 */
const pgliteTemplates = path.join(root, 'node_modules', '.cache', 'gpu-platform');

interface Proc {
  name: string;
  cwd: string;
  /** The program's TypeScript source (repository-relative); it runs compiled (scripts/lib/build.ts). */
  script: string;
  /** Arguments after the script. */
  args: string[];
  env?: Record<string, string>;
  /** Node/V8 flags before the script. */
  nodeFlags?: readonly string[];
  port: number;
}

/**
 * V8 flags for the services with an embedded database. PGlite is PostgreSQL compiled to WebAssembly; V8 runs it with
 * its baseline compiler and recompiles each function that has run a set amount (the tiering budget) with its
 * optimizing compiler, in background threads. Opening a database and migrating it runs much of PostgreSQL briefly,
 * and at the default budget that recompiled enough of it to be about a third of a fresh service's start-up CPU (1.4 s
 * of 5.5 s, measured with perf). A budget a hundred times larger leaves code that runs only at start-up to the
 * baseline compiler, while the queries a running service repeats still reach the optimizing one.
 */
const PGLITE_NODE_FLAGS = ['--wasm-tiering-budget=180000000'];

const dependencies: Proc[] = [
  {
    name: 's3',
    cwd: root,
    script: 'scripts/dev/s3-server.ts',
    // s3rver encrypts list continuation tokens with DES, kept in OpenSSL 3's legacy provider.
    nodeFlags: ['--openssl-legacy-provider'],
    args: ['--port', String(ports.s3), '--dir', path.join(data, 's3')],
    port: ports.s3,
  },
  {
    name: 'solana',
    cwd: root,
    script: 'tools/solana-localnet/src/server.ts',
    args: [
      '--setup',
      '--dir',
      path.join(data, 'solana'),
      '--port',
      String(ports.solana),
      '--ws-port',
      String(ports.solanaWs),
    ],
    port: ports.solana,
  },
];

const services: Proc[] = (
  [
    {
      name: 'auth',
      cwd: 'services/auth',
      nodeFlags: PGLITE_NODE_FLAGS,
      port: ports.auth,
      env: {
        AUTH__DATABASE__EMBEDDED_PATH: path.join(authDir, 'pglite'),
        AUTH__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
        JWT_PRIVATE_KEY_FILE: path.join(authDir, 'jwt-signing-key.pem'),
        AUTH__CLIENTS__BOOTSTRAP: 'platform:service,gateway:gateway,scheduler:scheduler',
        AUTH__CLIENTS__SECRETS_DIR: path.join(authDir, 'clients'),
        ADMIN_EMAIL: admin.email,
        ADMIN_PASSWORD: admin.password,
      },
    },
    {
      name: 'storage',
      cwd: 'services/storage',
      nodeFlags: STORAGE_NODE_FLAGS,
      port: ports.storage,
      env: { STORAGE_CONFIG_FILE: path.join(data, 'storage', 'config.yaml'), S3_ENDPOINT: `127.0.0.1:${ports.s3}` },
    },
    {
      name: 'provider-registry',
      cwd: 'services/provider-registry',
      nodeFlags: PGLITE_NODE_FLAGS,
      port: ports.registry,
      env: {
        REGISTRY__DATABASE__EMBEDDED_PATH: path.join(data, 'provider-registry', 'pglite'),
        REGISTRY__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
      },
    },
    {
      name: 'billing',
      cwd: 'services/billing',
      nodeFlags: PGLITE_NODE_FLAGS,
      port: ports.billing,
      env: {
        BILLING__DATABASE__EMBEDDED_PATH: path.join(data, 'billing', 'pglite'),
        BILLING__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
        SOLANA_RPC_URL: `http://127.0.0.1:${ports.solana}`,
        SOLANA_WS_URL: `ws://127.0.0.1:${ports.solanaWs}`,
        // Written by the localnet's setup (the mint, its decimals and the treasury keypair file), which runs while
        // billing starts: billing waits for it.
        BILLING__BLOCKCHAIN__LOCALNET_FILE: path.join(data, 'solana', 'mint.json'),
        BILLING__BLOCKCHAIN__LOCALNET_WAIT: '60s',
        // Who owns a provider machine: asked of the registry with the platform's machine client.
        PROVIDER_REGISTRY_URL: `http://127.0.0.1:${ports.registry}`,
        AUTH_URL: `http://127.0.0.1:${ports.auth}`,
        BILLING_CLIENT_CREDENTIALS_FILE: path.join(authDir, 'clients', 'platform.json'),
      },
    },
  ] as Omit<Proc, 'script' | 'args'>[]
)
  .filter((s) => existsSync(path.join(root, s.cwd, 'src/server.ts')))
  .map((s) => ({
    ...s,
    env: { ...s.env, PORT: String(s.port), AUTH_JWKS_URL: jwksUrl },
    cwd: path.join(root, s.cwd),
    script: `${s.cwd}/src/server.ts`,
    args: [],
  }));

// Every process runs under a supervisor: one that crashes is started again (after 0.5 s, then 1 s, 2 s ... at most
// 30 s apart), the others keep running; one that crashes 8 times in a row, each within a minute of starting, is given
// up on. A start-up that fails (a process that exits before its port opens), SIGINT and SIGTERM stop everything.
const supervisor = new Supervisor();
const supervised = new Map<string, Supervised>();
let stopping = false;

function start(p: Proc): void {
  // Source maps on, as under tsx: a stack trace names the TypeScript source's lines.
  const args = [...(p.nodeFlags ?? []), '--enable-source-maps', compiledPath(p.script), ...p.args];
  supervised.set(p.name, supervisor.start({ name: p.name, args, cwd: p.cwd, env: { ...process.env, ...p.env } }));
}

async function waitForPort(name: string, port: number, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await portOpen(port))) {
    // A process that dies before it first comes up is most likely misconfigured: that fails the start-up at once.
    const proc = supervised.get(name);
    if (proc && (proc.state !== 'running' || proc.restarts > 0)) throw new Error(`${name} exited during start-up`);
    if (Date.now() > deadline) throw new Error(`${name} did not open port ${port}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function stop(code: number) {
  if (stopping) return;
  stopping = true;
  process.stderr.write('[start] stopping\n');
  await supervisor.stop(15_000);
  process.exit(code);
}

process.once('SIGINT', () => void stop(0));
process.once('SIGTERM', () => void stop(0));
// Should this script end any other way (an error of its own), its children are not left running behind it.
process.once('exit', () => supervisor.signalAll('SIGTERM'));

// A start-up that fails (a port never opens, a process exits first) stops what it already started: nothing is
// left running behind it.
try {
  mkdirSync(data, { recursive: true });
  const built = await ensureBuilt(platformPrograms());
  if (built) process.stdout.write(`[start] ${built}\n`);
  // Everything starts at once. Services wait for the store and the chain themselves: storage retries the store until
  // object_store.connect_timeout; billing waits for the chain's setup to write its mint file (blockchain.localnet_wait),
  // then retries the chain until blockchain.connect_timeout.
  const started: Proc[] = [];
  for (const dep of dependencies) {
    if (await portOpen(dep.port)) {
      process.stdout.write(`[start] ${dep.name}: port ${dep.port} already in use, using what listens there\n`);
      continue;
    }
    started.push(dep);
  }
  started.push(...services);
  for (const p of started) start(p);
  await Promise.all(started.map((p) => waitForPort(p.name, p.port, 120_000)));
} catch (err) {
  process.stderr.write(`[start] start-up failed: ${(err as Error).message}\n`);
  await stop(1);
}
process.stdout.write(
  `[start] up: ${services.map((s) => `${s.name} http://127.0.0.1:${s.port} (docs /docs)`).join(', ')}\n` +
    `[start] every route needs a token: log in as the admin in ${adminFile}, register users at ` +
    `http://127.0.0.1:${ports.auth}/api/v1/auth/register, or use a client secret in ${path.join(authDir, 'clients')}\n`,
);
