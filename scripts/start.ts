/**
 * `pnpm start`: the whole platform on embedded defaults, with no external
 * setup. Starts an S3-compatible store (s3rver on .data/s3), a local Solana
 * chain (.data/solana) and every service that exists, all at once, each service on its contract
 * port with an embedded PGlite database under .data/<service>/ (no
 * DATABASE_URL needed). Consul registration is off; NATS is used only when
 * NATS_URL is set. Each runs under a supervisor (scripts/lib/supervisor.ts) that restarts it if it crashes.
 * The programs run as JavaScript compiled ahead (scripts/lib/build.ts), again whenever a source changed.
 * Ctrl-C (SIGINT) or SIGTERM stops everything gracefully, during start-up too, and exits 0 (`pnpm start` runs this
 * script with `exec`, so that pnpm sees this exit status rather than its shell's: see package.json).
 * Each process's output goes to its log file in the data folder (`<data>/logs/<name>.log`); the terminal shows
 * start-up, warnings, errors and a summary each minute (scripts/lib/platform-output.ts, platform-summary.ts).
 * In front of the services, the gateway (port 8080) is the platform's one origin: nginx on deploy/gateway's files where
 * nginx is installed, tools/gateway's Node proxy otherwise (PLATFORM_GATEWAY chooses).
 * PLATFORM_PORT_BASE moves every port (services at base+0..3 in contract order, s3rver at base+4, the Solana RPC at
 * base+5 and its WebSocket at base+6, the gateway at base+10), so a second copy (a test run) can share the machine; everything listens on
 * 127.0.0.1 unless PLATFORM_HOST names another address (0.0.0.0: every one).
 *
 * Before it starts anything it checks what it was given and refuses, in one line and with exit status 1, what could
 * not work: auth settings that do not fit together (scripts/lib/auth-mode.ts), a configuration file named that does
 * not exist, a data folder another `pnpm start` uses (a lock file in it, scripts/lib/instance-lock.ts), a port that
 * something else holds (another platform, a test server, anything).
 */
// First: a lifeline from whatever started this process, when it was given one (a test, `pnpm demo`): with it gone,
// however it went (`kill -9` too), this process stops as on SIGTERM, and what it runs with it (scripts/lib/lifeline.ts).
import './lib/lifeline.ts';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { connect, isIP } from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MAX_SOCKET_PATH_BYTES } from '../packages/common/src/http/gateway-socket.ts';
import { writeNatsSetup } from '../packages/common/src/messaging/nats-setup.ts';
// The storage service's V8 flags live in a file of their own at its package root, for this script, its benchmark and
// its start commands alike.
import { STORAGE_NODE_FLAGS } from '../services/storage/node-flags.ts';
import {
  findNginx,
  MIN_NGINX_VERSION,
  pdeathsigSupported,
  socketsIn,
  writeNginxGateway,
} from '../tools/gateway/src/nginx.ts';
import { operatorsAt } from '../tools/gateway/src/operators.ts';
import { authMode, LOOPBACK_REGISTER_PER_IP, loopbackAuthEnv } from './lib/auth-mode.ts';
import { compiledPath, ensureBuilt, LIFELINE, platformPrograms } from './lib/build.ts';
import { lockDataDir } from './lib/instance-lock.ts';
import {
  makeDataDir,
  pgliteTemplateDir,
  platformDataDir,
  platformHost,
  platformPorts,
  portFree,
  portOpen,
  repoRoot,
  SettingError,
  writePlatformFile,
} from './lib/platform.ts';
import { PlatformOutput } from './lib/platform-output.ts';
import { PlatformSummary } from './lib/platform-summary.ts';
import { describeHolders, portHolders } from './lib/port-holders.ts';
import { STOP_TIMEOUT_MS, type Supervised, Supervisor } from './lib/supervisor.ts';
import { answerHelp, refuseArguments } from './lib/usage.ts';

const USAGE = `usage: pnpm start

Runs the whole platform on embedded defaults, until Ctrl-C (SIGINT), SIGTERM or SIGHUP: an S3-compatible store, a
local Solana chain, the four services (each with an embedded database when no DATABASE_URL is given) and the
gateway, the platform's one origin. Takes no arguments; its settings are environment variables:

  PLATFORM_DATA_DIR   the data folder (default .data in the checkout); one pnpm start per folder
  PLATFORM_PORT_BASE  every port at once: services at base+0..3, S3 +4, chain RPC +5 and WebSocket +6, SMTP +7,
                      NATS +8, gateway +10 (default: the contract's ports 8000-8003, 9000, 8899, 8900, 1025, 4222
                      and 8080)
  PLATFORM_HOST       the address everything listens on (default 127.0.0.1; 0.0.0.0: every address). On
                      loopback alone, where every caller is this machine, auth takes ${LOOPBACK_REGISTER_PER_IP.replace('/1h', '')} sign-ups an hour
                      from it rather than 10 (AUTH__RATE_LIMIT__REGISTER_PER_IP=<n>/1h: another limit)
  ALGORITHM, SECRET_KEY (or JWT_SECRET), JWT_PRIVATE_KEY_FILE (or JWT_PRIVATE_KEY): how tokens are signed
                      (default: EdDSA with a key made in the data folder)
  AUTH_CONFIG_FILE, STORAGE_CONFIG_FILE, REGISTRY_CONFIG_FILE, BILLING_CONFIG_FILE: each service's settings
  SMTP_URL            where auth sends mail (default: the embedded mail catcher, read with pnpm mail)
  NATS_URL            use NATS for events (off by default); LOG_LEVEL: the services' log level
  PLATFORM_NATS       embedded: run nats-server (apt-get install nats-server) in operator mode on port base+8
                      (default 4222), JetStream in the data folder, each service a NATS user of its own and
                      daemons' users issued by auth (the set-up in nats/ of the data folder); empty: NATS_URL's
  PLATFORM_GATEWAY    the gateway: nginx (on deploy/gateway's files) or node (tools/gateway); default nginx where
                      nginx 1.19.5 or later and a setpriv with --pdeathsig are found, else node
  GATEWAY_OPERATORS   who may read /health/<service> at the gateway: addresses or CIDRs, comma-separated
                      (default: loopback and the private networks)

Each process's output goes to its log file in the data folder (logs/<name>.log: a service's JSON lines, one per
request among them); the terminal shows start-up, warnings, errors and, each minute something happened, a summary.

See README.md, "Quick start".`;
answerHelp(USAGE);
refuseArguments('pnpm start');

const root = repoRoot;

/** Refuses to start: one line, exit status 1, nothing started. */
function refuse(message: string): never {
  process.stderr.write(`[start] refused: ${message}\n`);
  process.exit(1);
}

/** A SettingError becomes a refusal; anything else is a fault of this script, thrown on. */
async function settled<T>(read: () => T | Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (err instanceof SettingError) refuse(err.message);
    throw err;
  }
}

// PLATFORM_DATA_DIR moves every local data folder (tests use a temporary one); PLATFORM_PORT_BASE every port;
// PLATFORM_HOST the address everything listens on.
const data = platformDataDir();
const ports = await settled(() => platformPorts());
const host = await settled(() => platformHost());

/**
 * Access control is on in every service. By default the auth service signs with an Ed25519 key kept in the data
 * folder (made at first start) and the others verify with its JWKS; `ALGORITHM=HS256 SECRET_KEY=...` signs with the
 * secret, which the others are given to verify with; `JWT_PRIVATE_KEY_FILE` names a key of the user's (see
 * scripts/lib/auth-mode.ts). The platform's own machine clients (`platform` for service-to-service calls, `gateway`,
 * `scheduler`) are created at start-up with their secrets in `<data>/auth/clients/<name>.json`, and an initial admin
 * with a password made once and kept in `<data>/auth/admin.json` (both mode 0600).
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

/**
 * The configuration files the user named (`<SERVICE>_CONFIG_FILE`), made absolute (each service runs in its own
 * folder) after checking they exist: a missing one would stop that service's start-up, so it stops this one first.
 * Storage's is the exception its spec makes: written with the defaults when absent (in the data folder by default).
 */
function configFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const name of ['AUTH_CONFIG_FILE', 'STORAGE_CONFIG_FILE', 'REGISTRY_CONFIG_FILE', 'BILLING_CONFIG_FILE']) {
    const value = process.env[name];
    if (!value) continue;
    const file = path.resolve(value);
    const absentOk = name === 'STORAGE_CONFIG_FILE' && !existsSync(file);
    if (!absentOk && !(existsSync(file) && statSync(file).isFile())) refuse(`${name} ${value} does not exist`);
    files[name] = file;
  }
  return files;
}
const userConfigFiles = configFiles();

/**
 * The gateway, the one origin in front of the services: nginx on docker-compose's gateway files (deploy/gateway) where
 * nginx is installed, the Node gateway (tools/gateway, @fastify/http-proxy) otherwise; PLATFORM_GATEWAY=nginx or node
 * chooses. Both route by the same table, answer the same problems and set the same forwarding headers
 * (tools/gateway/test runs the same checks through both); a small request costs nginx less CPU. nginx is not a
 * Node program and watches no lifeline: it runs under `setpriv --pdeathsig`, so it needs a setpriv that has it.
 * GATEWAY_OPERATORS (who may read `/health/<service>`) is checked here for both.
 */
function chooseGateway():
  | { kind: 'nginx'; nginx: { path: string; version: string }; operators?: string[]; description: string }
  | { kind: 'node'; description: string } {
  const choice = process.env.PLATFORM_GATEWAY || 'auto';
  if (!['auto', 'nginx', 'node'].includes(choice))
    throw new SettingError(`PLATFORM_GATEWAY must be nginx or node (or unset: nginx where installed), got ${choice}`);
  const operators = process.env.GATEWAY_OPERATORS?.split(',');
  try {
    if (operators) operatorsAt(operators);
  } catch (err) {
    throw new SettingError(`GATEWAY_OPERATORS: ${(err as Error).message}`);
  }
  const nginx = choice === 'node' ? undefined : findNginx();
  // Why nginx cannot be the gateway here, if it cannot.
  const unfit = !nginx
    ? 'no nginx was found (on PATH, in /usr/sbin or /usr/local/sbin)'
    : nginx.tooOld
      ? `nginx ${nginx.version} (${nginx.path}) is older than ${MIN_NGINX_VERSION}`
      : pdeathsigSupported()
        ? undefined
        : "this machine's setpriv has no --pdeathsig (util-linux 2.33 or later)";
  if (nginx && !unfit) {
    const description = `nginx ${nginx.version} (${nginx.path}) on deploy/gateway's files`;
    return { kind: 'nginx', nginx, description, ...(operators ? { operators } : {}) };
  }
  if (choice === 'nginx') throw new SettingError(`PLATFORM_GATEWAY=nginx, but ${unfit}`);
  const why = choice === 'node' ? 'PLATFORM_GATEWAY=node' : (unfit ?? '').replace(/ \(.*\)/, '');
  return { kind: 'node', description: `the Node gateway (tools/gateway; ${why})` };
}
const gatewayEngine = await settled(chooseGateway);

/**
 * NATS: none unless NATS_URL names a server of the user's (the services connect to it as they are), or
 * PLATFORM_NATS=embedded: nats-server (Debian's package, 2.9 or later) in operator mode, as docker-compose and
 * Kubernetes run it: the platform's set-up in `<data>/nats` (`writeNatsSetup`: the trust made at the first start and
 * kept, the server's accounts, each service's `.creds`), JetStream's store beside it, each service connecting as its
 * own user, auth issuing daemons theirs, and the registry and billing taking daemons' messages on subjects that name
 * their sender. Like nginx it watches no lifeline: it runs under `setpriv --pdeathsig`.
 */
function chooseNats(): { kind: 'none' } | { kind: 'embedded'; server: string; description: string } {
  const choice = process.env.PLATFORM_NATS || '';
  if (choice === '') return { kind: 'none' };
  if (choice !== 'embedded') throw new SettingError(`PLATFORM_NATS must be embedded (or unset), got ${choice}`);
  if (process.env.NATS_URL) throw new SettingError('set PLATFORM_NATS=embedded or NATS_URL, not both');
  const folders = [...(process.env.PATH ?? '').split(':').filter(Boolean), '/usr/sbin', '/usr/local/sbin'];
  // The first nats-server that answers `--version`: its path and what it answered (probed once).
  let server: string | undefined;
  let version = '';
  for (const candidate of folders.map((folder) => path.join(folder, 'nats-server'))) {
    const probe = spawnSync(candidate, ['--version'], { encoding: 'utf8', timeout: 5000 });
    if (probe.status !== 0) continue;
    server = candidate;
    version = probe.stdout.trim();
    break;
  }
  if (!server) {
    throw new SettingError('PLATFORM_NATS=embedded, but no nats-server was found (apt-get install nats-server)');
  }
  if (!pdeathsigSupported()) {
    throw new SettingError("PLATFORM_NATS=embedded, but this machine's setpriv has no --pdeathsig (util-linux 2.33)");
  }
  return { kind: 'embedded', server, description: `${version} (${server}) in operator mode` };
}
const natsEngine = await settled(chooseNats);

/** How a gateway kind is named to a person. */
const GATEWAY_NAMES = { nginx: 'nginx', node: 'the Node gateway' } as const;
/**
 * The gateway kind of the last start on this data folder (`<data>/last-gateway`), which this start replaces with its
 * own: where they differ (nginx installed since, or PLATFORM_GATEWAY set), the start-up says so, since the gateway
 * behaves a little differently (docs/local-platform.md, "The gateway").
 */
function gatewayChange(kind: keyof typeof GATEWAY_NAMES): string | undefined {
  const file = path.join(data, 'last-gateway');
  const last = existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
  writeFileSync(file, `${kind}\n`);
  if (!(last in GATEWAY_NAMES) || last === kind) return undefined;
  return `the gateway is now ${GATEWAY_NAMES[kind]} (it was ${GATEWAY_NAMES[last as keyof typeof GATEWAY_NAMES]})`;
}
const auth = await settled(() => authMode(process.env, authDir, path.join(root, 'services/auth')));
// On loopback alone, a register limit per address that `pnpm demo` and a person's own sign-ups do not run into
// (scripts/lib/auth-mode.ts, LOOPBACK_REGISTER_PER_IP); auth's own where other machines reach the platform.
const authLimits = await loopbackAuthEnv(process.env, host.bind);
const jwksUrl = `${host.url(ports.auth)}/.well-known/jwks.json`;

// One pnpm start per data folder (its embedded databases are not to be opened twice), and every port free: checked
// before anything starts, so that a second pnpm start on the same folder or ports says so and stops, rather than
// starting services that crash on the first one's ports and databases.
// The data folder is this user's alone (0700): the platform's secrets and users' objects are in it.
const dataDirTightened = makeDataDir(data);
const lock = await settled(() => lockDataDir(data));
process.once('exit', () => lock.release());
const taken = (
  await Promise.all(
    // NATS's port only where this start runs NATS (a NATS of the user's may hold 4222).
    Object.entries(ports)
      .filter(([name]) => name !== 'nats' || natsEngine.kind === 'embedded')
      .map(async ([name, port]) =>
        (await portFree(port, host.bind)) ? [] : [`${port} (${name}) by ${describeHolders(portHolders(port))}`],
      ),
  )
).flat();
if (taken.length > 0) {
  const one = taken.length === 1;
  refuse(
    `${one ? 'port' : 'ports'} in use on ${host.bind}: ${taken.join(', ')}: ` +
      `stop what holds ${one ? 'it' : 'them'}, or set PLATFORM_PORT_BASE`,
  );
}
const admin = initialAdmin();
/** A new embedded database is a copy of an empty one made once in this folder. */
const pgliteTemplates = pgliteTemplateDir();

interface Proc {
  name: string;
  cwd: string;
  /** The program's TypeScript source (repository-relative); it runs compiled (scripts/lib/build.ts). */
  script?: string;
  /** A program that is not Node's, run with `args` alone (no lifeline: it must stop with this process otherwise). */
  command?: string;
  /** Arguments after the script, or the command's. */
  args: string[];
  /** The signal that stops it gracefully, where not SIGTERM. */
  stopSignal?: NodeJS.Signals;
  env?: Record<string, string>;
  /** Node/V8 flags before the script. */
  nodeFlags?: readonly string[];
  /** Where it is up: a TCP port, or a Unix socket, that accepts connections. */
  port: number | { socket: string };
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
    args: ['--port', String(ports.s3), '--host', host.bind, '--dir', path.join(data, 's3')],
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
      '--host',
      host.bind,
      '--ws-port',
      String(ports.solanaWs),
    ],
    port: ports.solana,
  },
  {
    // Catches the platform's mail (address verification, password resets) in the data folder: `pnpm mail` reads it.
    name: 'mail',
    cwd: root,
    script: 'scripts/dev/mail-server.ts',
    args: ['--port', String(ports.mail), '--host', host.bind, '--dir', path.join(data, 'mail')],
    port: ports.mail,
  },
];

/**
 * The embedded NATS (PLATFORM_NATS=embedded, `chooseNats`): its set-up written (or completed) in `<data>/nats`, its
 * configuration beside it, and what each service is given to use it.
 */
const natsDir = path.join(data, 'nats');
const natsSetup = natsEngine.kind === 'embedded' ? await writeNatsSetup(natsDir) : undefined;
if (natsEngine.kind === 'embedded') {
  writeFileSync(
    path.join(natsDir, 'nats.conf'),
    [
      `listen: ${JSON.stringify(`${isIP(host.bind) === 6 ? `[${host.bind}]` : host.bind}:${ports.nats}`)}`,
      `jetstream: { store_dir: ${JSON.stringify(path.join(natsDir, 'store'))} }`,
      `include ${JSON.stringify('server/accounts.conf')}`,
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
}
/** The embedded NATS's process, with those the services use (it stops after them). */
const embeddedNats: Proc[] =
  natsEngine.kind === 'embedded'
    ? [
        {
          name: 'nats',
          cwd: natsDir,
          command: 'setpriv',
          args: ['--pdeathsig', 'SIGTERM', '--', natsEngine.server, '-c', path.join(natsDir, 'nats.conf')],
          port: ports.nats,
        },
      ]
    : [];
const natsUrl = `nats://${host.address(ports.nats)}`;
/** A service's NATS settings with the embedded NATS: the server, its own user, and what its part needs. */
function natsEnv(service: string): Record<string, string> {
  if (!natsSetup) return {};
  if (service === 'auth') return { NATS_ISSUER_FILE: natsSetup.issuer };
  const own = { NATS_URL: natsUrl, NATS_CREDENTIALS: natsSetup.creds[service] ?? '' };
  // Daemons' heartbeats and usage on subjects that name their sender, no token on them.
  if (service === 'provider-registry') return { ...own, REGISTRY__MESSAGING__SUBJECT_IDENTITY: 'true' };
  if (service === 'billing') return { ...own, BILLING__MESSAGING__SUBJECT_IDENTITY: 'true' };
  return own;
}

/**
 * The services' gateway sockets (`server.gateway_socket`, `<data>/run/<service>.sock`): the gateway reaches each
 * service there, and only there does a service take the client's address from X-Forwarded-For. The folder is this
 * user's alone (0700; a service refuses to start on one that is not), beside the platform's secrets.
 */
const gatewaySockets = path.join(data, 'run');
// A Unix socket's path has a bound (sockaddr_un): said here, before anything starts, rather than by four services.
if (Buffer.byteLength(path.join(gatewaySockets, 'provider-registry.sock')) > MAX_SOCKET_PATH_BYTES) {
  refuse(
    `the data folder ${data} is too long a path for the gateway's Unix sockets in it (at most ` +
      `${MAX_SOCKET_PATH_BYTES} bytes with run/provider-registry.sock): set PLATFORM_DATA_DIR to a shorter one`,
  );
}

/** Each service's configuration environment prefix. */
const ENV_PREFIX: Record<string, string> = {
  auth: 'AUTH',
  storage: 'STORAGE',
  'provider-registry': 'REGISTRY',
  billing: 'BILLING',
};

const services: (Proc & { port: number })[] = (
  [
    {
      name: 'auth',
      cwd: 'services/auth',
      nodeFlags: PGLITE_NODE_FLAGS,
      port: ports.auth,
      env: {
        AUTH__DATABASE__EMBEDDED_PATH: path.join(authDir, 'pglite'),
        AUTH__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
        ...auth.authEnv,
        ...authLimits,
        AUTH__CLIENTS__BOOTSTRAP: 'platform:service,gateway:gateway,scheduler:scheduler',
        AUTH__CLIENTS__SECRETS_DIR: path.join(authDir, 'clients'),
        ADMIN_EMAIL: admin.email,
        ADMIN_PASSWORD: admin.password,
        SMTP_URL: process.env.SMTP_URL || `smtp://${host.address(ports.mail)}`,
      },
    },
    {
      name: 'storage',
      cwd: 'services/storage',
      nodeFlags: [...STORAGE_NODE_FLAGS, ...PGLITE_NODE_FLAGS],
      port: ports.storage,
      env: {
        STORAGE_CONFIG_FILE: path.join(data, 'storage', 'config.yaml'),
        // The object catalog's database.
        STORAGE__DATABASE__EMBEDDED_PATH: path.join(data, 'storage', 'pglite'),
        STORAGE__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
        S3_ENDPOINT: host.address(ports.s3),
        // Stored bytes, billed: reported to billing each hour with the platform's machine client.
        BILLING_URL: host.url(ports.billing),
        AUTH_URL: host.url(ports.auth),
        STORAGE_CLIENT_CREDENTIALS_FILE: path.join(authDir, 'clients', 'platform.json'),
        ...auth.verifierEnv('STORAGE'),
      },
    },
    {
      name: 'provider-registry',
      cwd: 'services/provider-registry',
      nodeFlags: PGLITE_NODE_FLAGS,
      port: ports.registry,
      env: {
        REGISTRY__DATABASE__EMBEDDED_PATH: path.join(data, 'provider-registry', 'pglite'),
        REGISTRY__DATABASE__EMBEDDED_TEMPLATE_DIR: pgliteTemplates,
        ...auth.verifierEnv('REGISTRY'),
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
        SOLANA_RPC_URL: host.url(ports.solana),
        SOLANA_WS_URL: host.url(ports.solanaWs, 'ws'),
        // Written by the localnet's setup (the mint, its decimals and the treasury keypair file), which runs while
        // billing starts: billing waits for it.
        BILLING__BLOCKCHAIN__LOCALNET_FILE: path.join(data, 'solana', 'mint.json'),
        BILLING__BLOCKCHAIN__LOCALNET_WAIT: '60s',
        // Who owns a provider machine: asked of the registry with the platform's machine client.
        PROVIDER_REGISTRY_URL: host.url(ports.registry),
        // Where workloads' inputs, logs and outputs live: grants asked of storage with the same client.
        STORAGE_URL: host.url(ports.storage),
        AUTH_URL: host.url(ports.auth),
        BILLING_CLIENT_CREDENTIALS_FILE: path.join(authDir, 'clients', 'platform.json'),
        // Workloads' ports in a browser, each at an origin of its own through the gateway (browsers take every
        // `*.localhost` name for this machine).
        BILLING__REACH__PORTS_URL: `http://ports.localhost:${ports.gateway}`,
        ...auth.verifierEnv('BILLING'),
      },
    },
  ] as (Omit<Proc, 'script' | 'args'> & { port: number })[]
)
  .filter((s) => existsSync(path.join(root, s.cwd, 'src/server.ts')))
  .map((s) => ({
    ...s,
    env: {
      ...s.env,
      ...natsEnv(s.name),
      PORT: String(s.port),
      HOST: host.bind,
      AUTH_JWKS_URL: jwksUrl,
      // The gateway's own way in, where alone its X-Forwarded-For names the caller (auth's limits per address count
      // callers, not the gateway): every caller comes from 127.0.0.1 as the gateway does, so no address is trusted.
      [`${ENV_PREFIX[s.name]}__SERVER__GATEWAY_SOCKET`]: path.join(gatewaySockets, `${s.name}.sock`),
      ...userConfigFiles,
    },
    cwd: path.join(root, s.cwd),
    script: `${s.cwd}/src/server.ts`,
    args: [],
  }));

/**
 * nginx's telemetry receiver (tools/gateway/src/nginx-telemetry.ts): nginx sends it a line per request over UDP, on
 * loopback at the gateway's own port number (UDP, beside nginx's TCP), and it makes the gateway's spans (tracing on)
 * and keeps its metrics, which nginx serves at /metrics to operators from the receiver's socket in the sockets' folder.
 */
const telemetrySocket = path.join(gatewaySockets, 'telemetry.sock');
const gatewayTelemetry: Proc[] =
  gatewayEngine.kind === 'nginx'
    ? [
        {
          name: 'gateway-telemetry',
          cwd: path.join(root, 'tools/gateway'),
          script: 'tools/gateway/src/telemetry-server.ts',
          args: [],
          port: { socket: telemetrySocket },
          env: {
            GATEWAY_TELEMETRY_SYSLOG: host.address(ports.gateway),
            GATEWAY_TELEMETRY_METRICS: telemetrySocket,
            LOG_LEVEL: 'warn',
          },
        },
      ]
    : [];

// The one origin in front of the services (chosen above, `gatewayEngine`), reaching each at its gateway socket.
const gateway: Proc =
  gatewayEngine.kind === 'nginx'
    ? {
        name: 'gateway',
        cwd: path.join(data, 'gateway'),
        // The kernel stops nginx (SIGTERM: at once) when this process is gone, however it went: it watches no
        // lifeline. A stop of pnpm start's own asks it to finish its requests first (SIGQUIT, its graceful stop).
        command: 'setpriv',
        stopSignal: 'SIGQUIT',
        args: [
          '--pdeathsig',
          'SIGTERM',
          '--',
          gatewayEngine.nginx.path,
          ...writeNginxGateway({
            dir: path.join(data, 'gateway'),
            listen: `${isIP(host.bind) === 6 ? `[${host.bind}]` : host.bind}:${ports.gateway}${host.bind === '::' ? ' ipv6only=off' : ''}`,
            upstreams: socketsIn(gatewaySockets),
            telemetry: { syslog: host.address(ports.gateway), metrics: `unix:${telemetrySocket}` },
            ...(gatewayEngine.operators ? { operators: gatewayEngine.operators } : {}),
          }).args,
        ],
        port: ports.gateway,
      }
    : {
        name: 'gateway',
        cwd: path.join(root, 'tools/gateway'),
        script: 'tools/gateway/src/server.ts',
        args: [],
        port: ports.gateway,
        env: {
          PORT: String(ports.gateway),
          HOST: host.bind,
          LOG_LEVEL: 'warn',
          GATEWAY_AUTH_URL: host.url(ports.auth),
          GATEWAY_STORAGE_URL: host.url(ports.storage),
          GATEWAY_REGISTRY_URL: host.url(ports.registry),
          GATEWAY_BILLING_URL: host.url(ports.billing),
          GATEWAY_SOCKET_DIR: gatewaySockets,
        },
      };

// What the processes print goes to their log files in the data folder, and what a person needs of it to the terminal.
const output = new PlatformOutput(path.join(data, 'logs'), (line) => process.stdout.write(`${line}\n`));
const say = (line: string) => output.own(`[start] ${line}`);

// Every process runs under a supervisor: one that crashes is started again (after 0.5 s, then 1 s, 2 s ... at most
// 30 s apart), the others keep running; one that crashes 8 times in a row, each within a minute of starting, is given
// up on. A start-up that fails (a process that exits before its port opens), SIGINT, SIGTERM and SIGHUP stop
// everything. The lock records every process running, so that none is ever left holding the data folder unnoticed.
const supervisor = new Supervisor({
  onChildren: (running) => lock.recordChildren(running),
  log: (line) => output.own(line),
  output: (name, _stream, line) => output.line(name, line),
});
const supervised = new Map<string, Supervised>();
/**
 * Preloaded into every process: its end of the supervisor's lifeline, on which it stops (as on SIGTERM, killed with
 * what it started STOP_TIMEOUT_MS later) when this process is gone, however it went (scripts/lib/lifeline.ts).
 */
const lifeline = pathToFileURL(compiledPath(LIFELINE)).href;

function start(p: Proc): void {
  // Source maps on, as under tsx: a stack trace names the TypeScript source's lines.
  const args = p.script
    ? [...(p.nodeFlags ?? []), '--enable-source-maps', '--import', lifeline, compiledPath(p.script), ...p.args]
    : p.args;
  const env = { ...process.env, ...p.env };
  const { name, command, cwd, stopSignal } = p;
  supervised.set(name, supervisor.start({ name, command, args, cwd, env, stopSignal }));
}

async function waitForPort(name: string, port: Proc['port'], timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  const open = () => (typeof port === 'number' ? portOpen(port, host.connect) : socketOpen(port.socket));
  while (!(await open())) {
    // A process that dies before it first comes up is most likely misconfigured: that fails the start-up at once.
    const proc = supervised.get(name);
    if (proc && (proc.state !== 'running' || proc.restarts > 0)) throw new Error(`${name} exited during start-up`);
    if (Date.now() > deadline)
      throw new Error(`${name} did not open ${typeof port === 'number' ? `port ${port}` : port.socket}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Whether a Unix socket accepts connections. */
function socketOpen(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(socket);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/**
 * Stops everything and exits with `code`. Called again (Ctrl-C while a failed start-up stops, or the reverse), it
 * waits for the first call's exit: its caller goes no further, so nothing prints "up" after a stop.
 */
let stopped: Promise<never> | undefined;
let summaries: NodeJS.Timeout | undefined;
function stop(code: number): Promise<never> {
  stopped ??= (async () => {
    clearInterval(summaries);
    say('stopping');
    // The services and the gateway first, with what they use (the store, the chain, the mail catcher) still up while
    // they finish their work; those after them.
    await supervisor.stop(
      STOP_TIMEOUT_MS,
      [...dependencies, ...embeddedNats].map((d) => d.name),
    );
    // The last line at the terminal: what the processes print as they end goes to their log files alone.
    say(code === 0 ? 'stopped: every process it ran has ended' : 'stopped after the failed start-up');
    output.closeTerminal();
    process.exit(code);
  })();
  return stopped;
}

// Each signal stops once: the same signal again (pnpm passes on the Ctrl-C a terminal already sent the whole
// foreground process group, pnpm included) changes nothing, rather than killing this process in the middle of its
// stop, which pnpm would report as a failure.
process.on('SIGINT', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
// A closed terminal (or an ssh session that ends) sends SIGHUP: the same graceful stop.
process.on('SIGHUP', () => void stop(0));
// Once the terminal is closed, or whatever read this output is gone, a write fails (EIO, EPIPE): the stop goes on
// without output, rather than this process dying of the error halfway through it.
for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
// Should this script end any other way (an error of its own), its children are not left running behind it.
process.once('exit', () => supervisor.signalAll('SIGTERM'));

// A start-up that fails (a port never opens, a process exits first) stops what it already started: nothing is
// left running behind it. One stopped by Ctrl-C or SIGTERM is no failure: it only stops.
try {
  const built = await ensureBuilt(platformPrograms());
  if (built) say(built);
  say(`tokens: ${auth.description}`);
  say(`gateway: ${gatewayEngine.description}`);
  if (natsEngine.kind === 'embedded') say(`nats: ${natsEngine.description}, set-up in ${natsDir}`);
  const changed = gatewayChange(gatewayEngine.kind);
  if (changed) say(changed);
  if (dataDirTightened) say(dataDirTightened);
  say(
    `logs: each process's output in ${output.fileOf('<name>')} (a service's requests there too, one JSON line ` +
      'each); here: start-up, warnings, errors and a summary each minute',
  );
  // Everything starts at once. Services wait for the store and the chain themselves: storage retries the store until
  // object_store.connect_timeout; billing waits for the chain's setup to write its mint file (blockchain.localnet_wait),
  // then retries the chain until blockchain.connect_timeout.
  const started = [...dependencies, ...embeddedNats, ...services, ...gatewayTelemetry, gateway];
  for (const p of started) start(p);
  await Promise.all(started.map((p) => waitForPort(p.name, p.port, 120_000)));
} catch (err) {
  if (!stopped) say(`start-up failed: ${(err as Error).message}`);
  await stop(1);
}
if (stopped) await stopped;
const where = host.connect === host.bind ? '' : ` (listening on every address: PLATFORM_HOST=${host.bind})`;
say(
  `up${where}: gateway ${host.url(ports.gateway)} (every public path, one origin); ` +
    `${services.map((s) => `${s.name} ${host.url(s.port)} (docs /docs)`).join(', ')}`,
);
if (natsEngine.kind === 'embedded') {
  say(`nats: ${natsUrl} (daemons: nats_url ${natsUrl}, their NATS users issued by auth)`);
}
// Where `gpu` finds this platform when it is told no URL (tools/cli/src/platform-url.ts).
writePlatformFile(data, { gateway: host.url(ports.gateway), solana_rpc: host.url(ports.solana) });

say(
  `every route needs a token: log in as the admin in ${adminFile}, register users at ` +
    `${host.url(ports.gateway)}/api/v1/auth/register, or use a client secret in ${path.join(authDir, 'clients')}`,
);

// Each minute in which something happened, one line of what: the services' own counts (platform-summary.ts).
const summary = new PlatformSummary(services.map((s) => ({ name: s.name, url: host.url(s.port) })));
await summary.next(output.logged());
summaries = setInterval(() => {
  void summary.next(output.logged()).then((line) => {
    if (line && !stopped) output.own(line);
  });
}, 60_000);
