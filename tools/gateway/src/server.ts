/**
 * The gateway process: GATEWAY_AUTH_URL, GATEWAY_STORAGE_URL, GATEWAY_REGISTRY_URL and GATEWAY_BILLING_URL name the
 * services (default: the contract's ports on 127.0.0.1), or GATEWAY_SOCKET_DIR the folder of their gateway sockets
 * (`<folder>/<service>.sock`, as `pnpm start` runs them), PORT and HOST where it listens (8080, 127.0.0.1),
 * GATEWAY_OPERATORS the addresses or CIDRs (comma-separated) that may read `/health/<service>` (default: loopback and
 * the private networks), GATEWAY_UPGRADE_IDLE_TIMEOUT the seconds an upgraded stream (a WebSocket) may pass no byte
 * either way before the gateway closes it (3600), LOG_LEVEL its log, OTEL_EXPORTER_OTLP_ENDPOINT (and OpenTelemetry's
 * other variables) its traces. SIGTERM and SIGINT close it gracefully (requests in flight finish).
 */
import { startTracing } from '@gpu/common/tracing';
import { buildGateway } from './gateway.ts';

const env = process.env;
// Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (before the app: its server spans are made as it is built).
const tracing = await startTracing({ service: 'gateway' });
const local = (port: number) => `http://127.0.0.1:${port}`;
/** A setting's decimal digits (spaces around allowed) as a number; anything else (empty, `1e3`, `0x10`): undefined. */
const digits = (value: string): number | undefined => (/^\s*\d+\s*$/.test(value) ? Number(value) : undefined);
/** A whole number of seconds, at least 1, in milliseconds; anything else stops the gateway with its name. */
function idleSeconds(value: string): number {
  const seconds = digits(value);
  if (seconds === undefined || seconds < 1)
    throw new Error(`GATEWAY_UPGRADE_IDLE_TIMEOUT: ${JSON.stringify(value)} is not a whole number of seconds`);
  return seconds * 1000;
}
/** PORT (unset or empty: 8080); anything but a port number stops the gateway (a blank one was port 0: any port). */
function listenPort(value: string | undefined): number {
  if (value === undefined || value === '') return 8080;
  const port = digits(value);
  if (port === undefined || port > 65535) throw new Error(`PORT: ${JSON.stringify(value)} is not a port number`);
  return port;
}
const port = listenPort(env.PORT);
const app = await buildGateway({
  upstreams: {
    auth: env.GATEWAY_AUTH_URL || local(8000),
    storage: env.GATEWAY_STORAGE_URL || local(8001),
    'provider-registry': env.GATEWAY_REGISTRY_URL || local(8002),
    billing: env.GATEWAY_BILLING_URL || local(8003),
  },
  ...(env.GATEWAY_SOCKET_DIR ? { socketDir: env.GATEWAY_SOCKET_DIR } : {}),
  ...(env.GATEWAY_OPERATORS ? { operators: env.GATEWAY_OPERATORS.split(',') } : {}),
  logLevel: env.LOG_LEVEL || 'info',
  ...(env.GATEWAY_UPGRADE_IDLE_TIMEOUT
    ? { timeouts: { upgradeIdle: idleSeconds(env.GATEWAY_UPGRADE_IDLE_TIMEOUT) } }
    : {}),
});
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    void app
      .close()
      .then(() => tracing?.shutdown())
      .then(() => process.exit(0));
  });
}
await app.listen({ port, host: env.HOST || '127.0.0.1' });
