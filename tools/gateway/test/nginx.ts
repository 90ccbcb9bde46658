/**
 * docker-compose's gateway, run from its own files (deploy/gateway) by Debian's nginx in front of services on
 * loopback: nginx.conf as compose mounts it, with only what a machine without Docker must change (the upstreams'
 * container names become addresses on 127.0.0.1, nothing re-resolves them, the listen ports are free ones, the
 * telemetry receiver is one on loopback), and the included files (routes, problems, request IDs, operators, traces)
 * exactly as shipped.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, type ServerProcess, spawnProcess, waitForHttp } from '@gpu/common/testing';
import { DEPLOY_GATEWAY_DIR, findNginx, writeNginxGateway } from '../src/nginx.ts';
import type { Service } from '../src/routes.ts';

/** deploy/gateway, whose files these run. */
export const gatewayDir = DEPLOY_GATEWAY_DIR;

export interface NginxOptions {
  /** Base URLs (`http://127.0.0.1:port`) of the upstreams, by the container name compose gives them. */
  upstreams: Record<string, string>;
  /** Where the telemetry lines go (UDP `address:port`), in place of compose's `gateway-telemetry:5514`. */
  telemetrySyslog: string;
  /** A port for the object store's server (9000 in compose); a free one when absent. */
  objectStorePort?: number;
  /** operators.conf's content instead of the shipped one. */
  operators?: string;
}

export interface NginxGateway {
  base: string;
  /** The access log's lines so far (JSON, one per request). */
  accessLog: () => string[];
  process: ServerProcess;
  /** The worker processes' PIDs (they carry the traffic). */
  workers: () => number[];
  stop: () => Promise<void>;
}

/** nginx.conf with the compose-only parts replaced: addresses on loopback, free ports, a PID file of its own. */
function localConfig(dir: string, upstreams: Record<string, string>, ports: Record<string, number>): string {
  const shipped = readFileSync(path.join(gatewayDir, 'nginx.conf'), 'utf8');
  return shipped
    .replace(/^pid .*;$/m, `pid ${dir}/nginx.pid;`)
    .replace(/^\s*resolver .*;$/m, '')
    .replace(/server ([\w-]+):(\d+) resolve;/g, (_m, name: string, port: string) => {
      const url = upstreams[`${name}:${port}`] ?? upstreams[name] ?? 'http://127.0.0.1:9';
      return `server ${new URL(url).host};`;
    })
    .replace(/listen (\d+);/g, (_m, port: string) => `listen 127.0.0.1:${ports[port]};`);
}

/** Starts nginx on the shipped configuration; resolves once its /health answers. */
export async function startNginx(opts: NginxOptions): Promise<NginxGateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gateway-nginx-'));
  const conf = path.join(dir, 'conf');
  mkdirSync(path.join(conf, 'gpu-platform'), { recursive: true });
  for (const file of readdirSync(gatewayDir).filter((f) => f.endsWith('.conf') && f !== 'nginx.conf')) {
    // The access log goes to a file: a test's stdout is a socket, which nginx cannot open as /dev/stdout.
    const text = readFileSync(path.join(gatewayDir, file), 'utf8')
      .replaceAll('/dev/stdout', `${dir}/access.log`)
      .replaceAll('syslog:server=gateway-telemetry:5514,', `syslog:server=${opts.telemetrySyslog},`);
    writeFileSync(path.join(conf, 'gpu-platform', file), text);
  }
  if (opts.operators !== undefined) writeFileSync(path.join(conf, 'gpu-platform/operators.conf'), opts.operators);
  const ports: Record<string, number> = {
    '8080': await freePort(),
    '9000': opts.objectStorePort ?? (await freePort()),
    '8899': await freePort(),
    '8900': await freePort(),
  };
  writeFileSync(path.join(conf, 'nginx.conf'), localConfig(dir, opts.upstreams, ports));
  const gateway = await runNginx(
    ['-p', dir, '-c', path.join(conf, 'nginx.conf'), '-e', 'stderr', '-g', 'daemon off;'],
    `http://127.0.0.1:${ports['8080']}`,
    dir,
  );
  return {
    ...gateway,
    accessLog: () => readFileSync(path.join(dir, 'access.log'), 'utf8').trim().split('\n').filter(Boolean),
  };
}

/**
 * `pnpm start`'s nginx gateway (tools/gateway/src/nginx.ts) as `pnpm start` writes it, in a folder of its own, in
 * front of `upstreams` (`unix:/path` or `address:port`), once its /health answers.
 */
export async function startPlatformNginx(
  upstreams: Record<Service, string>,
  opts: { operators?: readonly string[]; telemetry: { syslog: string; metrics: string } },
): Promise<Omit<NginxGateway, 'accessLog'>> {
  const dir = mkdtempSync(path.join(tmpdir(), 'platform-nginx-'));
  const port = await freePort();
  const { args } = writeNginxGateway({ dir, listen: `127.0.0.1:${port}`, upstreams, ...opts });
  return runNginx(args, `http://127.0.0.1:${port}`, dir);
}

/** nginx with `args`, in the foreground, answering at `base`; its folder `dir` removed when it stops. */
async function runNginx(args: string[], base: string, dir: string): Promise<Omit<NginxGateway, 'accessLog'>> {
  // The machine's, found as pnpm start finds it (Debian's, installed by scripts/test-env.sh); stopped by the kernel
  // should this test process end without stopping it (as pnpm start runs it).
  const nginxPath = findNginx()?.path ?? 'nginx';
  const nginx = spawnProcess('setpriv', ['--pdeathsig', 'SIGTERM', '--', nginxPath, ...args], { env: process.env });
  await waitForHttp(`${base}/health`, nginx, { ok: true });
  const master = nginx.child.pid!;
  return {
    base,
    process: nginx,
    workers: () =>
      readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number),
    stop: async () => {
      nginx.child.kill('SIGQUIT');
      await nginx.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
