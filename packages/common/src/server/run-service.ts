/**
 * The server side of a service: listen (on its port, and on its gateway's socket when `server.gateway_socket` names
 * one), register, and shut down gracefully on
 * SIGINT/SIGTERM (deregister, stop accepting, drain in-flight requests, close
 * pools through the app's onClose hooks), bounded by `shutdown_timeout`.
 */
import v8 from 'node:v8';
import type { Logger } from 'pino';
import type { BaseConfig } from '../config-schema.ts';
import { durationMs } from '../duration.ts';
import type { App } from '../http/app.ts';
import { listenForGateway } from '../http/gateway-socket.ts';
import { buildRegistration, deregisterService, registerService } from '../registry/consul.ts';
import type { Tracing } from '../telemetry/tracing.ts';

export interface RunServiceOptions {
  /** Default registry name from the contract (`storage-service`, ...). */
  name: string;
  config: BaseConfig;
  logger: Logger;
  app: App;
  /** The process's tracing, when on (`startTracing`): its last spans are sent once the app has closed. */
  tracing?: Tracing;
}

export interface RunningService {
  port: number;
  /** Shuts down as a signal would; resolves when done. */
  shutdown: (reason: string) => Promise<void>;
}

export async function runService(opts: RunServiceOptions): Promise<RunningService> {
  const { config, logger, app } = opts;
  await app.listen({ host: config.server.host, port: config.server.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.server.port;
  logger.info({ port, host: config.server.host }, `${opts.name} listening`);
  const gatewaySocket = config.server.gateway_socket
    ? await listenForGateway(app, config.server.gateway_socket)
    : undefined;
  if (gatewaySocket) logger.info({ socket: config.server.gateway_socket }, 'answering the gateway on its socket');

  const registration = config.registry.enabled ? buildRegistration(config, opts.name, port) : undefined;
  if (registration) await registerService(config, registration, logger);

  let closing: Promise<void> | undefined;
  const shutdown = (reason: string): Promise<void> => {
    closing ??= (async () => {
      logger.info({ reason }, 'shutting down');
      const limit = durationMs(config.shutdown_timeout);
      const timer = setTimeout(() => {
        logger.error({ timeout_ms: limit }, 'graceful shutdown timed out, exiting');
        process.exit(1);
      }, limit);
      timer.unref();
      if (registration) await deregisterService(config, registration.id, logger);
      // No new connection from the gateway; those open end as the app closes them.
      gatewaySocket?.close();
      await app.close();
      await opts.tracing?.shutdown().catch((err: unknown) => logger.warn({ err }, 'the last spans were not sent'));
      clearTimeout(timer);
      logger.info('shutdown complete');
    })();
    return closing;
  };

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void shutdown(signal).then(
        () => process.exit(0),
        (err) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    });
  }
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled promise rejection'));
  return { port, shutdown };
}

/** Runs `main` and turns a start-up failure into one clear log line and exit code 1. */
export function startOrExit(main: () => Promise<unknown>): void {
  main().catch((err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(
      `${JSON.stringify({ level: 'fatal', time: new Date().toISOString(), msg: `start-up failed: ${message}` })}\n`,
    );
    process.exit(1);
  });
}

/**
 * Tunes the garbage collector of a process that relays streams (billing's reach relay, the provider daemon). Every
 * socket read is a new Buffer outside V8's heap; by default V8 runs a full mark-compact of the whole heap each time
 * such memory grows by its external-memory limit, which a relay passing hundreds of MB a second crosses several times
 * a second: measured with a forwarded port, billing and the daemon (heaps of 100 MB and more) spent 2.3-2.5 CPU
 * seconds a GB, a relay with a small heap 1.1, the same relay given a 200 MB heap 4. Counted in V8's global limit
 * instead (`--external-memory-accounted-in-global-limit`), the short-lived buffers go with the young generation's
 * scavenges, and the relay costs what a small one does.
 */
export function tuneGcForStreams(): void {
  // The flag is V8 13's (Node 24, the project's pinned Node); an older V8 would only print that it does not know it.
  if (Number(process.versions.v8.split('.')[0]) >= 13) {
    v8.setFlagsFromString('--external-memory-accounted-in-global-limit');
  }
}
