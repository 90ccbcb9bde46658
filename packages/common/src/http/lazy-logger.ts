/**
 * A request's logger, made on first use. Fastify gives every request a child
 * logger carrying its request and correlation IDs; making a pino child costs
 * (its bindings are serialised through the redaction rules) and at log levels
 * above `info` most requests never log a line. This stand-in answers a call
 * at a disabled level with nothing and makes the real child only when a line
 * is actually written (or a child or the bindings are asked for).
 */
import type { Bindings, ChildLoggerOptions, Level, Logger } from 'pino';

const LEVELS: readonly Level[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

type LogFn = (...args: unknown[]) => void;

export class LazyRequestLogger {
  private real?: Logger;
  declare trace: LogFn;
  declare debug: LogFn;
  declare info: LogFn;
  declare warn: LogFn;
  declare error: LogFn;
  declare fatal: LogFn;

  constructor(
    private readonly parent: Logger,
    private readonly childBindings: Bindings,
    private readonly childOptions: ChildLoggerOptions,
  ) {}

  /** The real child logger (made now if it was not yet). */
  get logger(): Logger {
    this.real ??= this.parent.child(this.childBindings, this.childOptions);
    return this.real;
  }

  get level(): string {
    return this.childOptions.level ?? this.parent.level;
  }

  isLevelEnabled(level: string): boolean {
    return this.real ? this.real.isLevelEnabled(level) : enabled(this.parent, this.childOptions, level);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.logger.child(bindings, options);
  }

  bindings(): Bindings {
    return this.logger.bindings();
  }
}

function enabled(parent: Logger, options: ChildLoggerOptions, level: string): boolean {
  if (options.level === undefined) return parent.isLevelEnabled(level);
  const want = parent.levels.values[level];
  const threshold = parent.levels.values[options.level];
  return want !== undefined && threshold !== undefined && want >= threshold;
}

for (const level of LEVELS) {
  Object.defineProperty(LazyRequestLogger.prototype, level, {
    value(this: LazyRequestLogger, ...args: unknown[]) {
      if (!this.isLevelEnabled(level)) return;
      (this.logger[level] as LogFn)(...args);
    },
    writable: true,
    configurable: true,
  });
}
