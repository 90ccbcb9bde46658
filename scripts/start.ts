/**
 * `pnpm start`: the whole platform on embedded defaults, with no external
 * setup. Starts an S3-compatible store (s3rver on .data/s3) and a local Solana
 * chain (.data/solana), then every service that exists, each on its contract
 * port with an embedded PGlite database under .data/<service>/ (no
 * DATABASE_URL needed). Consul registration is off; NATS is used only when
 * NATS_URL is set. Each runs under a supervisor (scripts/lib/supervisor.ts) that restarts it if it crashes.
 * Ctrl-C (SIGINT) or SIGTERM stops everything gracefully.
 * PLATFORM_PORT_BASE moves every port (services at base+0..3 in contract order, s3rver at base+4, the Solana RPC at
 * base+5 and its WebSocket at base+6), so a second copy (a test run) can share the machine.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
// The storage service's V8 flags live in a file of their own at its package root, for this script, its benchmark and
// its start commands alike.
import { STORAGE_NODE_FLAGS } from '../services/storage/node-flags.ts';
import { platformDataDir, platformPorts, repoRoot } from './lib/platform.ts';
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

interface Proc {
  name: string;
  cwd: string;
  args: string[];
  env?: Record<string, string>;
  /** Node/V8 flags before the script (services only). */
  nodeFlags?: readonly string[];
  port: number;
}

const dependencies: Proc[] = [
  {
    name: 's3',
    cwd: root,
    // s3rver encrypts list continuation tokens with DES, kept in OpenSSL 3's legacy provider.
    args: [
      '--openssl-legacy-provider',
      '--import',
      'tsx',
      'scripts/dev/s3-server.ts',
      '--port',
      String(ports.s3),
      '--dir',
      path.join(data, 's3'),
    ],
    port: ports.s3,
  },
  {
    name: 'solana',
    cwd: root,
    args: [
      '--import',
      'tsx',
      'tools/solana-localnet/src/server.ts',
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
      args: [],
      port: ports.auth,
      env: {
        AUTH__DATABASE__EMBEDDED_PATH: path.join(authDir, 'pglite'),
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
      args: [],
      nodeFlags: STORAGE_NODE_FLAGS,
      port: ports.storage,
      env: { STORAGE_CONFIG_FILE: path.join(data, 'storage', 'config.yaml'), S3_ENDPOINT: `127.0.0.1:${ports.s3}` },
    },
    {
      name: 'provider-registry',
      cwd: 'services/provider-registry',
      args: [],
      port: ports.registry,
      env: { REGISTRY__DATABASE__EMBEDDED_PATH: path.join(data, 'provider-registry', 'pglite') },
    },
    {
      name: 'billing',
      cwd: 'services/billing',
      args: [],
      port: ports.billing,
      env: {
        BILLING__DATABASE__EMBEDDED_PATH: path.join(data, 'billing', 'pglite'),
        SOLANA_RPC_URL: `http://127.0.0.1:${ports.solana}`,
        SOLANA_WS_URL: `ws://127.0.0.1:${ports.solanaWs}`,
        // Written by the localnet's setup: the mint, its decimals and the treasury keypair file.
        BILLING__BLOCKCHAIN__LOCALNET_FILE: path.join(data, 'solana', 'mint.json'),
        // Who owns a provider machine: asked of the registry with the platform's machine client.
        PROVIDER_REGISTRY_URL: `http://127.0.0.1:${ports.registry}`,
        AUTH_URL: `http://127.0.0.1:${ports.auth}`,
        BILLING_CLIENT_CREDENTIALS_FILE: path.join(authDir, 'clients', 'platform.json'),
      },
    },
  ] as Proc[]
)
  .filter((s) => existsSync(path.join(root, s.cwd, 'src/server.ts')))
  .map((s) => ({
    ...s,
    env: { ...s.env, PORT: String(s.port), AUTH_JWKS_URL: jwksUrl },
    cwd: path.join(root, s.cwd),
    args: [...(s.nodeFlags ?? []), '--import', 'tsx', 'src/server.ts'],
  }));

// Every process runs under a supervisor: one that crashes is started again (after 0.5 s, then 1 s, 2 s ... at most
// 30 s apart), the others keep running; one that crashes 8 times in a row, each within a minute of starting, is given
// up on. A start-up that fails (a process that exits before its port opens), SIGINT and SIGTERM stop everything.
const supervisor = new Supervisor();
const supervised = new Map<string, Supervised>();
let stopping = false;

function start(p: Proc): void {
  supervised.set(
    p.name,
    supervisor.start({ name: p.name, args: p.args, cwd: p.cwd, env: { ...process.env, ...p.env } }),
  );
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
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
  for (const dep of dependencies) {
    if (await portOpen(dep.port)) {
      process.stdout.write(`[start] ${dep.name}: port ${dep.port} already in use, using what listens there\n`);
      continue;
    }
    start(dep);
    await waitForPort(dep.name, dep.port);
  }
  for (const svc of services) start(svc);
  await Promise.all(services.map((s) => waitForPort(s.name, s.port, 120_000)));
} catch (err) {
  process.stderr.write(`[start] start-up failed: ${(err as Error).message}\n`);
  await stop(1);
}
process.stdout.write(
  `[start] up: ${services.map((s) => `${s.name} http://127.0.0.1:${s.port} (docs /docs)`).join(', ')}\n` +
    `[start] every route needs a token: log in as the admin in ${adminFile}, register users at ` +
    `http://127.0.0.1:${ports.auth}/api/v1/auth/register, or use a client secret in ${path.join(authDir, 'clients')}\n`,
);
