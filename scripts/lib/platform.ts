/**
 * Where `pnpm start` puts the platform, for it and for the commands that talk to it (`pnpm demo`, `pnpm wallet`, `gpu`): the
 * data folder (PLATFORM_DATA_DIR, default `<repo>/.data`), the ports (the contract's and the gateway's 8080, or
 * PLATFORM_PORT_BASE + 0..6 and 10: services at base+0..3 in contract order, the S3 store at base+4, the Solana RPC at
 * base+5 and its WebSocket at base+6, the gateway at base+10) and the address every process listens on (PLATFORM_HOST, default 127.0.0.1: this machine only).
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { connect, createServer, isIP } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { replaceFile } from '../../packages/common/src/files.ts';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export function platformDataDir(env: NodeJS.ProcessEnv = process.env): string {
  // Empty counts as unset, as for every PLATFORM_* setting: path.resolve('') would be the current folder.
  return path.resolve(env.PLATFORM_DATA_DIR || path.join(repoRoot, '.data'));
}

/** What a `pnpm start` leaves in its data folder, by which an existing folder is known as one. */
const DATA_DIR_MARKS = ['platform.lock', 'platform.json', 'last-gateway', 'auth', 's3', 'solana', 'logs'];

/**
 * Makes the data folder this user's alone (0700): it holds the platform's secrets and every user's objects (s3/),
 * which the umask's 0755 would let every local user read. A new one is made so; one made before with group or other
 * bits loses them, but only where it is plainly a data folder of this user's (owned by them, no sticky bit, and
 * empty or holding what `pnpm start` writes), so a PLATFORM_DATA_DIR naming a shared folder such as /tmp is left
 * as it is. Returns a line saying what changed, if anything did.
 */
export function makeDataDir(dataDir: string): string | undefined {
  if (!existsSync(dataDir)) {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    // mkdir's mode passes through the umask (a strict one could leave even the owner without write): set outright.
    chmodSync(dataDir, 0o700);
    return undefined;
  }
  const { mode, uid } = statSync(dataDir);
  const open = mode & 0o077;
  if (open === 0 || (mode & 0o1000) !== 0 || (process.getuid && uid !== process.getuid())) return undefined;
  const entries = readdirSync(dataDir);
  const ours = entries.length === 0 || entries.some((e) => DATA_DIR_MARKS.includes(e));
  if (!ours) return undefined;
  chmodSync(dataDir, mode & 0o700);
  const octal = (m: number) => (m & 0o777).toString(8).padStart(4, '0');
  return `the data folder ${dataDir} was open to other local users (mode ${octal(mode)}): now ${octal(mode & 0o700)}`;
}

/** A setting the platform cannot run with, said in one line (the commands print it without a stack trace). */
export class SettingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingError';
  }
}

/**
 * The address the platform listens on (`bind`: PLATFORM_HOST, an IP address, default 127.0.0.1) and the one its
 * parts and commands reach it at (`connect`: the same, or 127.0.0.1 when it listens on every address), with
 * `address` (`host:port`) and `url` for a port of it.
 */
export function platformHost(env: NodeJS.ProcessEnv = process.env) {
  const bind = env.PLATFORM_HOST || '127.0.0.1';
  if (isIP(bind) === 0)
    throw new SettingError(`PLATFORM_HOST must be an IP address (0.0.0.0 for every one), got ${bind}`);
  const connect = bind === '0.0.0.0' || bind === '::' ? '127.0.0.1' : bind;
  const address = (port: number) => `${isIP(connect) === 6 ? `[${connect}]` : connect}:${port}`;
  return { bind, connect, address, url: (port: number, scheme = 'http') => `${scheme}://${address(port)}` };
}

export function platformPorts(env: NodeJS.ProcessEnv = process.env) {
  const base = env.PLATFORM_PORT_BASE ? Number(env.PLATFORM_PORT_BASE) : undefined;
  // The highest port is the gateway's, base+10.
  if (base !== undefined && !(Number.isInteger(base) && base > 0 && base <= 65525))
    throw new SettingError(`PLATFORM_PORT_BASE must be a port number, got ${env.PLATFORM_PORT_BASE}`);
  /** The contract's port, or its place after PLATFORM_PORT_BASE. */
  const port = (contractPort: number, offset: number) => (base === undefined ? contractPort : base + offset);
  return {
    auth: port(8000, 0),
    storage: port(8001, 1),
    registry: port(8002, 2),
    billing: port(8003, 3),
    s3: port(9000, 4),
    solana: port(8899, 5),
    solanaWs: port(8900, 6),
    /** The embedded mail catcher's SMTP (Mailpit's port). */
    mail: port(1025, 7),
    /** NATS, when pnpm start runs one (PLATFORM_NATS=embedded). */
    nats: port(4222, 8),
    gateway: port(8080, 10),
  };
}

/**
 * Where a checkout keeps the empty embedded database that each new one is copied from (made at the first start; see
 * @gpu/common's seedFromTemplate): outside the data folder, so a fresh data folder gets one too. Like the compiled
 * programs, a cache of the checkout.
 */
export const pgliteTemplateDir = (checkout: string = repoRoot) =>
  path.join(checkout, 'node_modules', '.cache', 'gpu-platform');

/** Whether something accepts TCP connections on this port of `host` (127.0.0.1 by default). */
export function portOpen(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Whether this port of `host` is free to listen on: tried by listening on it for a moment, so a port held on every
 * address (0.0.0.0) by another program counts as taken too, whether or not it answers.
 */
export function portFree(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/**
 * Where a running `pnpm start` is reached, as it wrote it into its data folder once everything listened
 * (`<data>/platform.json`, replaced whole at each start): for `gpu`, which finds the platform there when it is given no
 * URL and no PLATFORM_PORT_BASE or PLATFORM_HOST (tools/cli/src/platform-url.ts).
 */
export interface PlatformFile {
  /** The gateway, the platform's one origin. */
  gateway: string;
  /** The local chain's JSON-RPC. */
  solana_rpc: string;
}

export const platformFile = (dataDir: string) => path.join(dataDir, 'platform.json');

export function writePlatformFile(dataDir: string, urls: PlatformFile): void {
  replaceFile(platformFile(dataDir), `${JSON.stringify(urls, null, 2)}\n`);
}

/** What `pnpm start` wrote into the data folder, or undefined where it wrote nothing readable. */
export function readPlatformFile(dataDir: string): PlatformFile | undefined {
  try {
    const urls = JSON.parse(readFileSync(platformFile(dataDir), 'utf8')) as Partial<PlatformFile>;
    return typeof urls.gateway === 'string' && typeof urls.solana_rpc === 'string'
      ? { gateway: urls.gateway, solana_rpc: urls.solana_rpc }
      : undefined;
  } catch {
    return undefined;
  }
}
