/**
 * `pnpm start`'s gateway where nginx is installed: docker-compose's gateway files (deploy/gateway: the route table,
 * the body limits, the problems, the request ID, the operators) run unchanged by the machine's nginx, in front of the
 * services' gateway sockets instead of compose's container names. Only the main file is `pnpm start`'s own: one
 * server on the platform's gateway port, an upstream per service on its Unix socket, the PID and temporary files in
 * the gateway's folder, the telemetry receiver's addresses (nginx-telemetry.ts: its lines, its metrics); and the access
 * log is off (each service logs its requests with the request ID, as behind the Node gateway). Why: a small request costs nginx 90-115 µs of CPU where it costs the Node gateway 165-295 µs
 * (docs/benchmarks.md, "Gateway").
 *
 *   const nginx = findNginx();
 *   const { args } = writeNginxGateway({
 *     dir, listen: '127.0.0.1:8080', upstreams: socketsIn(runDir),
 *     telemetry: { syslog: '127.0.0.1:8080', metrics: `unix:${runDir}/gateway-telemetry.sock` },
 *   });
 *   spawn(nginx.path, args);
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseNetwork } from './operators.ts';
import { SERVICES, type Service } from './routes.ts';

/** docker-compose's gateway files, which this one includes as shipped. */
export const DEPLOY_GATEWAY_DIR = fileURLToPath(new URL('../../../deploy/gateway', import.meta.url));

/** Where nginx is looked for after PATH: Debian installs it in /usr/sbin, which is not on every user's PATH. */
const SBIN = ['/usr/sbin', '/usr/local/sbin', '/sbin', '/usr/local/nginx/sbin'];

/**
 * The oldest nginx that runs this configuration: `-e stderr` (its errors on standard error before the configuration
 * is read) came in 1.19.5; Debian 11 and Ubuntu 22.04 ship 1.18.
 */
export const MIN_NGINX_VERSION = '1.19.5';

/** Whether version `a` (dotted numbers) is at least `b`. */
function atLeast(a: string, b: string): boolean {
  const [x, y] = [a, b].map((v) => v.split('.').map((n) => Number.parseInt(n, 10) || 0));
  for (let i = 0; i < 3; i++) if ((x?.[i] ?? 0) !== (y?.[i] ?? 0)) return (x?.[i] ?? 0) > (y?.[i] ?? 0);
  return true;
}

/**
 * The machine's nginx: its path and version (`nginx -v`), with `tooOld` set where it is older than MIN_NGINX_VERSION;
 * undefined where none runs.
 */
export function findNginx(): { path: string; version: string; tooOld: boolean } | undefined {
  const folders = [...(process.env.PATH ?? '').split(':').filter(Boolean), ...SBIN];
  for (const candidate of folders.map((folder) => path.join(folder, 'nginx'))) {
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      continue;
    }
    const probe = spawnSync(candidate, ['-v'], { encoding: 'utf8', timeout: 5000 });
    if (probe.status !== 0) continue;
    const version = /nginx\/(\S+)/.exec(probe.stderr)?.[1] ?? '0';
    return { path: candidate, version, tooOld: !atLeast(version, MIN_NGINX_VERSION) };
  }
  return undefined;
}

/** A path as one nginx configuration token (quoted: a data folder may hold spaces). */
const quoted = (value: string) => `"${value.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;

/**
 * Whether this machine's setpriv sets a parent-death signal (`--pdeathsig`, util-linux 2.33 or later): how `pnpm start`
 * has the kernel stop nginx, which watches no lifeline, when `pnpm start` is gone.
 */
export function pdeathsigSupported(): boolean {
  return spawnSync('setpriv', ['--pdeathsig', 'SIGTERM', '--', 'true'], { timeout: 5000 }).status === 0;
}

/** The services reached at their gateway sockets in `folder` (`<folder>/<service>.sock`, `server.gateway_socket`). */
export function socketsIn(folder: string): Record<Service, string> {
  return Object.fromEntries(SERVICES.map((s) => [s, `unix:${path.join(folder, `${s}.sock`)}`])) as Record<
    Service,
    string
  >;
}

export interface NginxGatewaySettings {
  /** nginx's folder (its prefix): the configuration written here, its PID file and temporary files. Made if absent. */
  dir: string;
  /** Where it listens: `address:port` (an IPv6 address in brackets). */
  listen: string;
  /** Each service as nginx's `server` names it: `unix:/path/to/service.sock`, or `address:port`. */
  upstreams: Record<Service, string>;
  /**
   * The gateway's telemetry receiver (nginx-telemetry.ts): where nginx sends its lines (`syslog`, UDP `address:port`)
   * and where it serves the metrics nginx passes on at /metrics (`metrics`, as `upstreams`' values).
   */
  telemetry: { syslog: string; metrics: string };
  /**
   * Who may read `/health/<service>`: addresses or CIDRs (the Node gateway's GATEWAY_OPERATORS); deploy/gateway's
   * operators.conf when absent. One that is neither throws, naming it.
   */
  operators?: readonly string[];
}

/** nginx's arguments for a configuration written by `writeNginxGateway`: in the foreground, its errors on stderr. */
const argsFor = (dir: string, config: string) => ['-p', dir, '-c', config, '-e', 'stderr', '-g', 'daemon off;'];

/**
 * Writes the gateway's configuration into `settings.dir` (again at every call: deploy/gateway's files as they are
 * now) and answers nginx's arguments to run it.
 */
export function writeNginxGateway(settings: NginxGatewaySettings): { config: string; args: string[] } {
  const conf = path.join(settings.dir, 'conf');
  const included = path.join(conf, 'gpu-platform');
  mkdirSync(included, { recursive: true, mode: 0o700 });
  for (const file of readdirSync(DEPLOY_GATEWAY_DIR).filter((f) => f.endsWith('.conf') && f !== 'nginx.conf')) {
    copyFileSync(path.join(DEPLOY_GATEWAY_DIR, file), path.join(included, file));
  }
  // The access log left out (each service logs its requests with the request ID; the Node gateway under pnpm start
  // logs none either), and not opened at all: nginx cannot open /dev/stdout when its output is a socket, as the
  // supervisor's is. The telemetry lines go to pnpm start's receiver.
  const httpConf = path.join(included, 'http.conf');
  const shipped = readFileSync(httpConf, 'utf8');
  const accessLog = /^access_log \/dev\/stdout platform;$/m;
  const telemetryLog = /^access_log syslog:server=gateway-telemetry:5514,/m;
  if (!accessLog.test(shipped) || !telemetryLog.test(shipped))
    throw new Error(`${httpConf}: its access_log lines are not the ones expected`);
  writeFileSync(
    httpConf,
    shipped
      .replace(accessLog, '# (pnpm start: no access log)')
      .replace(telemetryLog, `access_log syslog:server=${settings.telemetry.syslog},`),
  );
  if (settings.operators) {
    // Each as parsed (one that is not an address or a CIDR throws, as the Node gateway's), so nginx reads it alike.
    const allowed = settings.operators
      .map(parseNetwork)
      .map((n) => `allow ${n.address}${n.prefix === undefined ? '' : `/${n.prefix}`};\n`)
      .join('');
    writeFileSync(path.join(included, 'operators.conf'), `# GATEWAY_OPERATORS\n${allowed}deny all;\n`);
  }
  const upstreams = [
    ...SERVICES.map(
      (service) =>
        `  upstream ${service} {\n    server ${quoted(settings.upstreams[service])};\n    keepalive 256;\n  }\n`,
    ),
    `  upstream gateway-telemetry {\n    server ${quoted(settings.telemetry.metrics)};\n  }\n`,
  ].join('');
  // Every file nginx writes in its own folder, none in the places built into it (/var/lib/nginx on Debian: made by
  // the package's first start as root, absent where nginx has never run and not this user's to write).
  mkdirSync(path.join(settings.dir, 'temp'), { recursive: true, mode: 0o700 });
  const temporary = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
    .map((kind) => `  ${kind}_temp_path ${quoted(path.join(settings.dir, 'temp', kind))};\n`)
    .join('');
  const config = path.join(conf, 'nginx.conf');
  writeFileSync(
    config,
    `# pnpm start's gateway (tools/gateway/src/nginx.ts writes this file at each start): deploy/gateway's files in
# front of the services' gateway sockets. Edit those files, not this one.
pid ${quoted(path.join(settings.dir, 'nginx.pid'))};
worker_processes auto;
error_log stderr warn;
${
  // A master run as root would start its workers as nobody, who cannot open the sockets' folder (this user's alone).
  process.getuid?.() === 0 ? 'user root;\n' : ''
}
events {
  worker_connections 4096;
}

http {
  include gpu-platform/http.conf;
${temporary}
${upstreams}
  server {
    listen ${settings.listen};
    include gpu-platform/platform-api.conf;
  }
}
`,
  );
  return { config, args: argsFor(settings.dir, config) };
}
