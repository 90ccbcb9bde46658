/**
 * Structured JSON logging with pino; pretty output only when asked. Every
 * line written while a request is being handled carries that request's
 * `request_id` and `correlation_id`, whichever logger writes it: the app
 * factory enters `requestLogContext` per request and the root logger's
 * mixin reads it, so domain code may log through the process-wide logger.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import pino, { type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/** The IDs a log line written during a request carries. */
export interface RequestLogIds {
  request_id: string;
  correlation_id: string;
}

/** The IDs of the request whose async context is running, if any (entered by the app factory). */
export const requestLogContext = new AsyncLocalStorage<RequestLogIds>();

/**
 * Marks a logger whose bindings already hold the request's IDs (Fastify's
 * per-request child logger and its children), so the mixin does not write
 * them a second time as duplicate JSON keys.
 */
export const BINDS_REQUEST_IDS: unique symbol = Symbol('binds request ids');

function requestIdsMixin(_merge: object, _level: number, logger: Logger): object {
  const ids = requestLogContext.getStore();
  // A fresh object each time: pino merges the line's own fields into what the mixin returns.
  if (ids === undefined || (logger as Logger & { [BINDS_REQUEST_IDS]?: boolean })[BINDS_REQUEST_IDS]) return {};
  return { request_id: ids.request_id, correlation_id: ids.correlation_id };
}

export interface LoggerSettings {
  service: string;
  instanceId: string;
  level: string;
  pretty?: boolean;
  /** Where to write; defaults to stdout. Tests pass a stream to read lines back. */
  destination?: pino.DestinationStream;
}

/** Options shared by every service's root logger. */
export function loggerOptions(s: LoggerSettings): LoggerOptions {
  return {
    level: s.level,
    base: { service: s.service, instance_id: s.instanceId },
    timestamp: pino.stdTimeFunctions.isoTime,
    messageKey: 'msg',
    mixin: requestIdsMixin,
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
  return pino(options);
}

/** The root logger of a service process, from the shared configuration keys. */
export function serviceLogger(
  service: string,
  config: { instance_id: string; log_level: string; log_pretty: boolean },
): Logger {
  return createLogger({ service, instanceId: config.instance_id, level: config.log_level, pretty: config.log_pretty });
}
