/**
 * The nginx gateways' telemetry receiver as a process (nginx-telemetry.ts): `pnpm start` runs it beside nginx, and
 * docker-compose as the `gateway-telemetry` service. GATEWAY_TELEMETRY_SYSLOG is where nginx's lines arrive (UDP
 * `address:port`, default 127.0.0.1:5514), GATEWAY_TELEMETRY_METRICS where the metrics are served (`address:port` or a
 * Unix socket's path, default 127.0.0.1:9464), OTEL_EXPORTER_OTLP_ENDPOINT (and OpenTelemetry's other variables) where
 * the spans go (none: no spans, the metrics alone), LOG_LEVEL its log. SIGTERM and SIGINT stop it.
 */
import { createLogger } from '@gpu/common/logger';
import { startTracing } from '@gpu/common/tracing';
import { LineIds, startNginxTelemetry } from './nginx-telemetry.ts';

const env = process.env;
const logger = createLogger({ service: 'gateway-telemetry', instanceId: 'gateway', level: env.LOG_LEVEL || 'info' });
const ids = new LineIds();
// The gateway's spans, with the IDs nginx gave them (tracing on only).
const tracing = await startTracing({ service: 'gateway', idGenerator: ids });
const telemetry = await startNginxTelemetry({
  syslog: env.GATEWAY_TELEMETRY_SYSLOG || '127.0.0.1:5514',
  metrics: env.GATEWAY_TELEMETRY_METRICS || '127.0.0.1:9464',
  ...(tracing ? { ids } : {}),
  logger,
});
logger.info(
  { syslog_port: telemetry.syslogPort, metrics: telemetry.metricsAt, tracing: Boolean(tracing) },
  "taking nginx's telemetry lines",
);
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    void telemetry
      .close()
      .then(() => tracing?.shutdown())
      .then(() => process.exit(0));
  });
}
