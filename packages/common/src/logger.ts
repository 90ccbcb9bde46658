/** Structured JSON logging with pino; pretty output only when asked. */
import pino, { type Logger, type LoggerOptions } from 'pino';
import { traceFields } from './telemetry/tracing.ts';

export type { Logger };

export interface LoggerSettings {
  service: string;
  instanceId: string;
  level: string;
  pretty?: boolean;
  /** Where to write; defaults to stdout. Tests pass a stream to read lines back. */
  destination?: pino.DestinationStream;
}

/** Options shared by every service's root logger. */
function loggerOptions(s: LoggerSettings): LoggerOptions {
  return {
    level: s.level,
    base: { service: s.service, instance_id: s.instanceId },
    timestamp: pino.stdTimeFunctions.isoTime,
    messageKey: 'msg',
    // A line written inside a request or a message names its trace and span (tracing on; nothing to do when off).
    mixin: traceFields,
    formatters: { level: (label) => ({ level: label }) },
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers.cookie',
        '*.password',
        '*.refresh_token',
        '*.access_token',
        '*.secret',
      ],
      censor: '[redacted]',
    },
  };
}

export function createLogger(s: LoggerSettings): Logger {
  const options = loggerOptions(s);
  if (s.destination) return pino(options, s.destination);
  if (s.pretty) {
    const { formatters: _jsonOnly, ...prettyOptions } = options;
    return pino({
      ...prettyOptions,
      transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:standard' } },
    });
  }
  // Written synchronously, one write per line. pino's default stdout stream buffers and, at exit, flushes what it
  // holds in a loop that retries every error but EAGAIN: once nothing reads the output any more (the supervisor that
  // started the service was killed), a write fails with EPIPE for ever and the process never exits, SIGTERM or not.
  // A synchronous write meets EPIPE at once, and pino then drops the lines that follow.
  return pino(options, pino.destination({ dest: 1, sync: true }));
}

/** The root logger of a service process, from the shared configuration keys. */
export function serviceLogger(
  service: string,
  config: { instance_id: string; log_level: string; log_pretty: boolean },
): Logger {
  return createLogger({ service, instanceId: config.instance_id, level: config.log_level, pretty: config.log_pretty });
}

/**
 * A service context for one request's work: the same context with the request's logger, so the lines domain code
 * logs through `ctx.logger` carry the request's request_id and correlation_id. Route handlers pass it to the domain
 * calls that log. Not for a context used as a key (billing's usage batchers are keyed by their context).
 * (An AsyncLocalStorage would stamp every line by itself, but on Node 20 it runs async hooks on every promise of
 * every request, the hot paths included. The benchmarks here are too noisy to show that cost (billing: 0.39-0.43 ms
 * per usage update with one, 0.37-0.48 without); this form costs nothing.)
 */
export function withRequestLogger<T extends { logger: Logger }>(ctx: T, request: { log: unknown }): T {
  return { ...ctx, logger: request.log as Logger };
}
