/**
 * A failure of this machine's file system said as one: `cannot write ./x: is a directory`, naming the path as the
 * user gave it, never as a failure to reach the platform nor as Node's `EISDIR: illegal operation on a directory`.
 */

/** The words for the errors a copy meets, as `cp` says them. */
const REASONS: Record<string, string> = {
  EACCES: 'permission denied',
  EDQUOT: 'disk quota exceeded',
  EEXIST: 'file exists',
  EISDIR: 'is a directory',
  EMFILE: 'too many open files',
  ENAMETOOLONG: 'file name too long',
  ENOENT: 'no such file or directory',
  ENOSPC: 'no space left on device',
  ENOTDIR: 'not a directory',
  EPERM: 'operation not permitted',
  EROFS: 'read-only file system',
};

/** Codes of a connection that could not be made: the platform out of reach. */
const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EADDRNOTAVAIL',
  'ETIMEDOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** Codes of a connection's, never a file's, as a system call's error carries them. */
const CONNECTION = new Set([...UNREACHABLE, 'ECONNRESET', 'ECONNABORTED']);

/**
 * Whether an error is the file system's (Node's errors of a system call carry its code and the call; a socket's carry
 * them too, and are not).
 */
export function isFileSystemError(err: unknown): err is NodeJS.ErrnoException {
  const e = err as NodeJS.ErrnoException | null;
  return (
    typeof e?.code === 'string' &&
    typeof e.syscall === 'string' &&
    !CONNECTION.has(e.code) &&
    e.syscall !== 'connect' &&
    e.syscall !== 'getaddrinfo'
  );
}

/** Whether a request failed because no connection to the platform could be made (fetch's error, by its cause). */
export function isUnreachable(err: unknown): boolean {
  const code = (err as { cause?: { code?: unknown } } | null)?.cause?.code;
  return err instanceof TypeError && typeof code === 'string' && UNREACHABLE.has(code);
}

/**
 * A file system error as one line about `file`, also where it is the cause of another (a stream read from a file that
 * failed under an upload fails the upload with it); any other error as it is.
 */
export function localError(err: unknown, action: 'read' | 'write' | 'remove', file: string): unknown {
  const cause = (err as { cause?: unknown } | null)?.cause;
  const fs = isFileSystemError(err) ? err : isFileSystemError(cause) ? cause : undefined;
  if (!fs) return err;
  const reason = REASONS[fs.code!] ?? fs.code!.toLowerCase();
  return new Error(`cannot ${action} ${file}: ${reason}`, { cause: fs });
}

/** Runs a file system call, its failure said as `localError` says it. */
export async function locally<T>(
  action: 'read' | 'write' | 'remove',
  file: string,
  call: () => T | Promise<T>,
): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw localError(err, action, file);
  }
}
