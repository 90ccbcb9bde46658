/**
 * A file that appears whole or not at all: written under a name of this process's own, then linked into place (link
 * makes the name or fails with EEXIST, atomically). Several processes creating the same file at once (two auth
 * instances making the development signing key, two `pnpm start`s taking a data folder's lock) leave exactly one
 * version, and none of them ever reads it half-written: a plain `writeFile(..., { flag: 'wx' })` makes the file empty
 * first and fills it after.
 *
 *   if (!createFileOnce(file, pem, 0o600)) { ... someone else's is there: read it ... }
 */
import { linkSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';

/** Makes `file` holding `text` in one step; false (and nothing written) when it already exists. */
export function createFileOnce(file: string, text: string, mode = 0o644): boolean {
  const own = `${file}.${process.pid}.tmp`;
  writeFileSync(own, text, { mode });
  try {
    linkSync(own, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return false;
  } finally {
    unlinkSync(own);
  }
}

/** Replaces `file` with `text` in one step: a reader sees the old file or the new one, never half of either. */
export function replaceFile(file: string, text: string, mode = 0o644): void {
  const own = `${file}.${process.pid}.tmp`;
  writeFileSync(own, text, { mode });
  renameSync(own, file);
}
