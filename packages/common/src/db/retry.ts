/** The one retry helper: bounded exponential backoff with jitter for transient failures. */
import { isDependencyDown } from '../dependency-errors.ts';

export interface RetryOptions {
  attempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  retryable?: (err: unknown) => boolean;
}

const SERIALIZATION_CODES = new Set(['40001', '40P01']);

/**
 * A deadlock or serialization failure: PostgreSQL rolled the transaction (or statement) back, so running it again
 * cannot apply it twice.
 */
export function isLockConflict(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && SERIALIZATION_CODES.has(code);
}

/** Connection loss, a server shutting down, a serialization failure or a deadlock. */
export function isTransientDbError(err: unknown): boolean {
  return isLockConflict(err) || isDependencyDown(err);
}

export async function withRetry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const attempts = opts.attempts ?? 4;
  const base = opts.baseDelayMs ?? 25;
  const max = opts.maxDelayMs ?? 1000;
  const retryable = opts.retryable ?? isTransientDbError;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (attempt >= attempts || !retryable(err)) throw err;
      const delay = Math.min(max, base * 2 ** (attempt - 1));
      await new Promise((r) => setTimeout(r, delay / 2 + Math.random() * (delay / 2)));
    }
  }
}
