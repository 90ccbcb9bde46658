/**
 * Uploads a job's output through a presigned PUT URL (see `upload.ts`):
 *
 *   UPLOAD_URL=... pnpm --filter @gpu/provider-daemon upload <file>      # the URL from the environment
 *   pnpm --filter @gpu/provider-daemon upload <file> - < url.txt         # the URL from stdin
 *   pnpm --filter @gpu/provider-daemon upload <file> <presigned-url>     # the URL as an argument
 *     [--content-type TYPE] [--attempts N] [--timeout 60s] [--skip-etag-check]
 *
 * A presigned URL is a credential until it expires: as an argument it shows in `ps` and the shell's history, so the
 * environment or stdin is the better way to hand it over.
 *
 * Prints what was stored on success; on failure prints the error and exits 1 (2 for a wrong command line).
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseDuration } from '@gpu/common/duration';
import { UploadError, uploadFile } from './upload.ts';

const USAGE =
  'usage: upload <file> [<presigned-put-url> | -] [--content-type TYPE] [--attempts N] [--timeout 60s]\n' +
  '       [--skip-etag-check]\n' +
  '       the URL: UPLOAD_URL in the environment, `-` to read it from stdin, or the argument';

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

/** The presigned URL: the argument, stdin's first line for `-`, else UPLOAD_URL. */
async function presignedUrl(arg: string | undefined): Promise<string | undefined> {
  if (arg !== '-') return arg ?? process.env.UPLOAD_URL;
  process.stdin.setEncoding('utf8');
  let input = '';
  for await (const chunk of process.stdin) input += chunk;
  return input.trim().split('\n')[0]?.trim();
}

const args = commandLine();
const [file, urlArg, ...extra] = args.positionals;
if (!file || extra.length) usage('expected a file and a presigned URL');
const url = await presignedUrl(urlArg);
if (!url) usage('no presigned URL: set UPLOAD_URL, pass `-` and write it to stdin, or pass it as an argument');
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
