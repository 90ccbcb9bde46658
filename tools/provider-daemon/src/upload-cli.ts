/**
 * Uploads a job's output through a presigned PUT URL (see `upload.ts`):
 *
 *   pnpm --filter @gpu/provider-daemon upload <file> <presigned-url>
 *     [--content-type TYPE] [--attempts N] [--timeout 60s] [--skip-etag-check]
 *
 * Prints what was stored on success; on failure prints the error and exits 1 (2 for a wrong command line).
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseDuration } from '@gpu/common';
import { UploadError, uploadFile } from './upload.ts';

const USAGE =
  'usage: upload <file> <presigned-put-url> [--content-type TYPE] [--attempts N] [--timeout 60s]\n' +
  '       [--skip-etag-check]';

function usage(problem: string): never {
  process.stderr.write(`${problem}\n${USAGE}\n`);
  process.exit(2);
}

function commandLine() {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        'content-type': { type: 'string' },
        attempts: { type: 'string' },
        timeout: { type: 'string' },
        'skip-etag-check': { type: 'boolean' },
      },
    });
  } catch (err) {
    return usage((err as Error).message);
  }
}

const args = commandLine();
const [file, url, ...extra] = args.positionals;
if (!file || !url || extra.length) usage('expected a file and a presigned URL');
const attempts = args.values.attempts === undefined ? undefined : Number(args.values.attempts);
if (attempts !== undefined && !(Number.isInteger(attempts) && attempts >= 1)) usage('--attempts: a whole number ≥ 1');
const timeoutMs = args.values.timeout === undefined ? undefined : parseDuration(args.values.timeout);
if (args.values.timeout !== undefined && !timeoutMs) usage('--timeout: a duration such as 60s');

// `pnpm --filter` runs the script in the package's folder; a relative path means the caller's folder (INIT_CWD).
const source = path.resolve(process.env.INIT_CWD ?? process.cwd(), file);
try {
  const result = await uploadFile(source, url, {
    attempts,
    timeoutMs,
    contentType: args.values['content-type'],
    checkEtag: !args.values['skip-etag-check'],
    onRetry: ({ attempt, error }) => process.stderr.write(`attempt ${attempt} failed: ${error.message}; retrying\n`),
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (err) {
  process.stderr.write(`upload failed: ${err instanceof UploadError ? err.message : String(err)}\n`);
  process.exit(1);
}
