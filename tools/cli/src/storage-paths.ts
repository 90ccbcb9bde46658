/**
 * The paths `gpu storage cp|rm|ls` take, as `cp`, `scp` and `aws s3 cp` read theirs: `gpu:<key>` names an object of
 * your folder (or of `--bucket`), `gpu:<prefix>/` and `gpu:` alone a remote folder (every key under the prefix),
 * anything else a local path (`-`: standard input or output). A copy into a folder (a `gpu:` path ending in `/`, a
 * local path ending in `/` or naming a directory) takes the source's base name; a copy of a folder (`-r`) copies what
 * is under it, each at its path relative to the folder. Messages name objects as the user does (`gpu:dir/file`), never
 * as the store holds them.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { ApiError, type ObjectRef } from '@gpu/client';
import { UsageError } from './cli.ts';
import { printable } from './format.ts';

const REMOTE = 'gpu:';

/**
 * The key or prefix a `gpu:` path names; undefined for a local path. A key is relative to your folder: `gpu:/x` (as
 * scp names an absolute path) is a usage error naming `gpu:x`, not a key the store would refuse.
 */
export function remoteKey(arg: string): string | undefined {
  if (!arg.startsWith(REMOTE)) return undefined;
  const key = arg.slice(REMOTE.length);
  if (key.startsWith('/')) {
    throw new UsageError(
      `${arg}: keys are relative to your folder, with no leading / (${REMOTE}${key.replace(/^\/+/, '')})`,
    );
  }
  return key;
}

/**
 * The key of a command that names remote objects only (`rm`, `presign`), where `gpu:` may be left out: a bare path is
 * the key as written. An empty one is a usage error (`rm -r "$UNSET"` would be every object of yours: that is `gpu:`,
 * written out), as is a leading `/`, as for `gpu:` paths.
 */
export function namedKey(arg: string): string {
  const remote = remoteKey(arg);
  if (remote !== undefined) return remote;
  if (arg === '') throw new UsageError(`an empty path names no object (all of yours is ${REMOTE}, written out)`);
  if (arg.startsWith('/')) return remoteKey(`${REMOTE}${arg}`)!;
  return arg;
}

/** Whether a key names a remote folder: empty (all of yours) or ending in `/`. */
export const isPrefix = (key: string): boolean => key === '' || key.endsWith('/');

/** The prefix of the remote folder `key` names (`dir` and `dir/` both: `dir/`; `` stays ``). */
export const asPrefix = (key: string): string => (isPrefix(key) ? key : `${key}/`);

/** How a message names a key: as the user writes it. */
export const shown = (key: string): string => `${REMOTE}${printable(key)}`;

/** A key's or prefix's last segment (`a/b.txt`: `b.txt`; `a/b/`: `b`; ``: ``). */
const keyBaseName = (key: string): string => key.replace(/\/+$/, '').split('/').pop() ?? '';

/** The object reference of a key, in `bucket` when one is given. */
export const refOf = (key: string, bucket?: string): ObjectRef => ({ ...(bucket ? { bucket } : {}), key });

/** Whether a local path names a directory that exists. */
function isLocalDirectory(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

/** Whether a local destination names a folder to copy into: it ends in a separator or is a directory. */
const intoLocalFolder = (to: string): boolean => /[/\\]$/.test(to) || isLocalDirectory(to);

/** The key a local file is stored under: in a remote folder (`gpu:dir/`, `gpu:`) with its base name, else as named. */
export const uploadKey = (file: string, key: string): string => (isPrefix(key) ? `${key}${path.basename(file)}` : key);

/** The key an object is copied to within the platform: into a remote folder with its base name, else as named. */
export const copyKey = (from: string, to: string): string => (isPrefix(to) ? `${to}${keyBaseName(from)}` : to);

/** The local file an object is written to: into a folder with the key's base name, else the path as named. */
export const downloadFile = (key: string, to: string): string =>
  intoLocalFolder(to) ? path.join(to, keyBaseName(key)) : to;

/**
 * The local file an object of a remote folder is written to: its key past the prefix, under `root`; undefined when
 * that would not be a file under `root` (a key of a bucket made outside the platform may hold `..` or a leading `/`).
 */
export function fileUnder(root: string, relativeKey: string): string | undefined {
  const segments = relativeKey.split('/');
  if (segments.some((s) => s === '.' || s === '..') || relativeKey.startsWith('/')) return undefined;
  const file = path.resolve(root, ...segments.filter((s) => s !== ''));
  return file.startsWith(`${path.resolve(root)}${path.sep}`) ? file : undefined;
}

/** The platform's OBJECT_NOT_FOUND, naming the object as the user does (the service names the store's key). */
export function objectNotFound(ref: ObjectRef): ApiError {
  const where = ref.bucket ? ` in bucket ${ref.bucket}` : '';
  return new ApiError(404, { status: 404, code: 'OBJECT_NOT_FOUND', detail: `no object ${shown(ref.key)}${where}` });
}

/** OBJECT_NOT_FOUND for a remote folder with nothing under it. */
export const nothingUnder = (prefix: string): ApiError =>
  new ApiError(404, { status: 404, code: 'OBJECT_NOT_FOUND', detail: `nothing under ${shown(prefix)}` });
