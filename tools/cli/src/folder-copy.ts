/**
 * The files of one `cp -r`, `FILES_AT_ONCE` at a time, as `aws s3 cp --recursive` goes through them: a file that fails
 * is said on standard error as it fails (`gpu: failed <from> -> <to>: <why>`; on a terminal below the progress bar
 * once it ends; with --json one JSON object a line, `{from, to, status, code, detail}`) and the others go on; the
 * copy then ends with exit status 1, saying how many failed (`COPY_INCOMPLETE`, with `copied`, `failed` and `files`
 * in JSON). A failure every other file would meet too stops it instead: the files under way finish, no new one
 * starts, and the failure is said last, as a single command's is, with the counts (the sign-in refused or out of
 * date, a folder or bucket not the caller's, a bucket not there, the platform out of reach). Either way the failure
 * holds what was copied (`CopyIncomplete`), which the command prints as it prints a whole copy's.
 */
import { ApiError } from '@gpu/client';
import { forEachLimited } from '@gpu/common/concurrency';
import { type Context, UsageError } from './cli.ts';
import { isUnreachable } from './local-errors.ts';
import { problemLine, problemOf, ShownFailure } from './problems.ts';
import type { Progress } from './progress.ts';

/** Files sent or fetched at once by `cp -r`. */
const FILES_AT_ONCE = 4;

/** One file of a folder copy: where it comes from and goes to, as the user names them. */
export interface FileCopy {
  from: string;
  to: string;
}

/** A folder copy that did not copy every file: what it did copy, in the files' order, and why the rest were not. */
export class CopyIncomplete<R> extends ShownFailure {
  constructor(
    readonly copied: R[],
    problem: ConstructorParameters<typeof ShownFailure>[0],
    cause?: unknown,
  ) {
    super(problem, cause);
  }
}

/** Codes that refuse the copy rather than one file. */
const REFUSES_ALL = new Set([
  'BUCKET_NOT_FOUND',
  'BUCKET_NOT_OWNED',
  'FOLDER_NOT_OWNED',
  'DEFAULT_BUCKET_NOT_CONFIGURED',
]);

/** Whether `err` is one every other file of the copy would meet too. */
function stopsTheCopy(err: unknown): boolean {
  if (err instanceof UsageError) return true;
  if (err instanceof ApiError) {
    return err.status === 401 || err.status === 403 || (err.code !== undefined && REFUSES_ALL.has(err.code));
  }
  return isUnreachable(err);
}

/**
 * Copies each of `files` with `copyOne`, `FILES_AT_ONCE` at once: what each gave, in the files' order. `what` names
 * the copy in its closing lines (`data -> gpu:sets/`), `done` what a copied file is (`stored`, `written`).
 */
export async function copyEach<F extends FileCopy, R>(
  ctx: Context,
  files: readonly F[],
  progress: Progress,
  names: { what: string; done: string },
  copyOne: (file: F) => Promise<R>,
): Promise<R[]> {
  const copied: R[] = [];
  let finished = 0;
  let failed = 0;
  let stop: unknown;
  try {
    await forEachLimited(files, FILES_AT_ONCE, async (f, i) => {
      if (stop !== undefined) return;
      try {
        copied[i] = await copyOne(f);
        finished++;
      } catch (err) {
        if (stopsTheCopy(err)) {
          stop ??= err;
          return;
        }
        failed++;
        const problem = problemOf(err, ctx.url, 'none');
        progress.say(
          ctx.json
            ? `${JSON.stringify({ from: f.from, to: f.to, ...problem })}\n`
            : `gpu: failed ${f.from} -> ${f.to}: ${problemLine(problem, false)}\n`,
        );
      }
    });
  } finally {
    progress.stop();
  }
  const of = `${files.length} files of ${names.what}`;
  const counts = { copied: finished, failed, files: files.length };
  const done = copied.filter((r) => r !== undefined);
  if (stop !== undefined) {
    if (!ctx.json) {
      const failedToo = failed ? `, ${failed} failed (said above),` : '';
      process.stderr.write(`gpu: ${finished} of ${of} ${names.done}${failedToo} before the failure below\n`);
    }
    // The failure as it is (its own words and hint), with the counts beside it in JSON.
    throw new CopyIncomplete(done, counts, stop);
  }
  if (failed > 0) {
    throw new CopyIncomplete(done, {
      status: null,
      code: 'COPY_INCOMPLETE',
      detail: `${failed} of ${of} failed (each said above), ${finished} ${names.done}: the same command again copies them all`,
      ...counts,
    });
  }
  return copied;
}
