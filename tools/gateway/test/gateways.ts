/**
 * The platform's gateways as running processes, for the tests and the benchmark alike: `pnpm start`'s two (this
 * package's, from source or compiled as `pnpm start` runs it, and nginx on deploy/gateway's files as `pnpm start` writes
 * them) and docker-compose's nginx on its own files (./nginx.ts).
 */
import { fileURLToPath } from 'node:url';
import { createLogger } from '@gpu/common/logger';
import { freePort, type ServerProcess, spawnProcess, spawnServer, waitForHttp } from '@gpu/common/testing';
import { compiledPath, ensureBuilt } from '../../../scripts/lib/build.ts';
import { socketsIn } from '../src/nginx.ts';
import { type LineIds, type NginxTelemetry, startNginxTelemetry } from '../src/nginx-telemetry.ts';
import { SERVICES, type Service } from '../src/routes.ts';
import { startNginx, startPlatformNginx } from './nginx.ts';

/** Services' base URLs; one left out is nowhere the gateway can reach (or `pnpm start`'s default). */
export type Upstreams = Partial<Record<Service, string>>;

export interface RunningGateway {
  base: string;
  /** The processes that carry the traffic. */
  pids: () => number[];
  stop: () => Promise<void>;
}

/** Options of an nginx gateway's start: who may read `/health/<service>` and `/metrics`; `ids`: make spans too. */
interface NginxEngineOptions {
  operators?: readonly string[];
  /** The tracer's ID generator (tracing on in this process): the receiver makes the gateway's spans. */
  ids?: LineIds;
}

/** The nginx gateways' telemetry receiver, in this process on loopback (free ports). */
export function startReceiver(ids?: LineIds): Promise<NginxTelemetry> {
  const logger = createLogger({ service: 'gateway-telemetry-test', instanceId: 't', level: 'warn' });
  return startNginxTelemetry({ syslog: '127.0.0.1:0', metrics: '127.0.0.1:0', logger, ...(ids ? { ids } : {}) });
}

const SCRIPT = 'tools/gateway/src/server.ts';

/**
 * `pnpm start`'s gateway in its own process, once its /health answers: from source, or `compiled` as `pnpm start` runs
 * it; with `socketDir`, reaching the services at their gateway sockets there (`<dir>/<service>.sock`); with
 * `operators`, those addresses alone may read `/health/<service>`.
 */
export async function startNodeGateway(
  to: Upstreams,
  opts: { compiled?: boolean; socketDir?: string; operators?: readonly string[] } = {},
): Promise<RunningGateway> {
  const port = await freePort();
  const env = {
    ...process.env,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    ...(to.auth ? { GATEWAY_AUTH_URL: to.auth } : {}),
    ...(to.storage ? { GATEWAY_STORAGE_URL: to.storage } : {}),
    ...(to['provider-registry'] ? { GATEWAY_REGISTRY_URL: to['provider-registry'] } : {}),
    ...(to.billing ? { GATEWAY_BILLING_URL: to.billing } : {}),
    ...(opts.socketDir ? { GATEWAY_SOCKET_DIR: opts.socketDir } : {}),
    ...(opts.operators ? { GATEWAY_OPERATORS: opts.operators.join(',') } : {}),
  };
  const cwd = fileURLToPath(new URL('..', import.meta.url));
  let gateway: ServerProcess;
  if (opts.compiled) {
    await ensureBuilt([SCRIPT]);
    gateway = spawnProcess(process.execPath, ['--enable-source-maps', compiledPath(SCRIPT)], { cwd, env });
  } else {
    gateway = spawnServer('src/server.ts', { cwd, env });
  }
  const base = `http://127.0.0.1:${port}`;
  await waitForHttp(`${base}/health`, gateway, { ok: true });
  return {
    base,
    pids: () => [gateway.child.pid!],
    stop: async () => {
      gateway.child.kill('SIGTERM');
      await gateway.exited;
    },
  };
}

/**
 * docker-compose's nginx on deploy/gateway's files, its workers carrying the traffic, with a telemetry receiver of its
 * own in this process (nginx-telemetry.ts, as compose's `gateway-telemetry`); with `operators`, those addresses alone
 * may read `/health/<service>` and `/metrics` (operators.conf replaced).
 */
export async function startComposeNginx(to: Upstreams, opts: NginxEngineOptions = {}): Promise<RunningGateway> {
  const operators = opts.operators && `${opts.operators.map((a) => `allow ${a};\n`).join('')}deny all;\n`;
  const receiver = await startReceiver(opts.ids);
  const nginx = await startNginx({
    upstreams: { ...(to as Record<string, string>), 'gateway-telemetry': receiver.metricsAt },
    telemetrySyslog: `127.0.0.1:${receiver.syslogPort}`,
    ...(operators ? { operators } : {}),
  });
  return {
    base: nginx.base,
    pids: nginx.workers,
    stop: async () => {
      await nginx.stop();
      await receiver.close();
    },
  };
}

/**
 * `pnpm start`'s nginx gateway (tools/gateway/src/nginx.ts, deploy/gateway's files): in front of the services at
 * their gateway sockets in `socketDir` as `pnpm start` runs it, else at their URLs (one left out is nowhere), with a
 * telemetry receiver of its own in this process.
 */
export async function startPlatformNginxGateway(
  to: Upstreams,
  opts: NginxEngineOptions & { socketDir?: string } = {},
): Promise<RunningGateway> {
  const upstreams = opts.socketDir
    ? socketsIn(opts.socketDir)
    : (Object.fromEntries(SERVICES.map((s) => [s, new URL(to[s] ?? 'http://127.0.0.1:9').host])) as Record<
        Service,
        string
      >);
  const receiver = await startReceiver(opts.ids);
  const nginx = await startPlatformNginx(upstreams, {
    ...(opts.operators ? { operators: opts.operators } : {}),
    telemetry: { syslog: `127.0.0.1:${receiver.syslogPort}`, metrics: new URL(receiver.metricsAt).host },
  });
  return {
    base: nginx.base,
    pids: nginx.workers,
    stop: async () => {
      await nginx.stop();
      await receiver.close();
    },
  };
}
