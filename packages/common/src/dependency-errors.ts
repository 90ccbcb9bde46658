/**
 * Telling a dependency outage (database, object store, RPC node unreachable or
 * shutting down) from other errors, by the error codes of Node, pg and the
 * SDKs. The HTTP layer answers such errors 503; the retry helper retries them.
 */

const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  '57P01', // admin_shutdown
  '57P02',
  '57P03', // cannot_connect_now
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '53300', // too_many_connections
]);

/** Whether an error says a dependency (database, store, RPC) could not be reached. */
export function isDependencyDown(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as { code?: unknown; cause?: unknown; message?: unknown; name?: unknown };
  if (typeof e.code === 'string' && TRANSIENT_CODES.has(e.code)) return true;
  if (
    typeof e.message === 'string' &&
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect/i.test(e.message)
  ) {
    return true;
  }
  if (e.name === 'AggregateError' && Array.isArray((err as AggregateError).errors)) {
    return (err as AggregateError).errors.some(isDependencyDown);
  }
  return e.cause !== undefined && e.cause !== err && isDependencyDown(e.cause);
}
