/**
 * `storage ls|cp|mv|presign|rm|usage`: your objects, keys of your folder in the platform bucket (or of a bucket of yours), named as
 * `cp`, `scp` and `aws s3 cp` name theirs (storage-paths.ts), streamed both ways and never held whole; a large
 * transfer shows its progress on a terminal; `usage` is what storing them cost (billing's storage charges).
 */
import { rm, stat } from 'node:fs/promises';
import { ApiError, type ObjectInfo } from '@gpu/client';
import { forEachLimited } from '@gpu/common/concurrency';
import { type Command, InvalidArgumentError } from 'commander';
import { type Context, context, count, moment, printJson, show, UsageError } from '../cli.ts';
import { type CopyFilter, copyFilter } from '../copy-filters.ts';
import { headOf } from '../download.ts';
import { CopyIncomplete } from '../folder-copy.ts';
import { bytes, time, tokens, tokensIfAny } from '../format.ts';
import { localError, locally } from '../local-errors.ts';
import { everyPage, pageRequest } from '../paging.ts';
import { copyDown } from '../storage-download.ts';
import {
  asPrefix,
  isPrefix,
  namedKey,
  nothingUnder,
  objectNotFound,
  refOf,
  remoteKey,
  shown,
} from '../storage-paths.ts';
import { copyWithin } from '../storage-remote-copy.ts';
import { type CopySource, copyUp } from '../storage-upload.ts';

/** Deletions sent at once by `rm -r`. */
const DELETES_AT_ONCE = 8;

/** Where the store keeps a user's keys of the platform bucket, which the user never names. */
const USER_FOLDER = /users\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\//g;

/** A refusal of the platform as the user says the keys: `gpu:<key>`, not the store's `users/<id>/<key>`. */
function inUserTerms(err: unknown): unknown {
  if (!(err instanceof ApiError) || !err.problem.detail?.match(USER_FOLDER)) return err;
  return new ApiError(err.status, { ...err.problem, detail: err.problem.detail.replace(USER_FOLDER, 'gpu:') });
}

/** A command's action, its refusals said with the user's paths. */
function action<A extends unknown[]>(run: (...args: A) => Promise<void>) {
  return async (...args: A) => {
    try {
      await run(...args);
    } catch (err) {
      throw inUserTerms(err);
    }
  };
}

export function storageCommands(program: Command) {
  const storage = program
    .command('storage')
    .description(
      'your objects: keys of your folder in the platform bucket, or of a bucket of yours (--bucket). gpu:<key> names ' +
        'an object, gpu:<prefix>/ (and gpu: alone) a remote folder: every key under the prefix',
    );
  storage
    .command('ls [path]')
    .description('list the objects under a prefix (gpu:datasets/ or datasets/; every page), by key')
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(
      action(async (at: string | undefined, opts: { bucket?: string }) => {
        const ctx = context(program);
        const prefix = at === undefined ? '' : (remoteKey(at) ?? at);
        const objects = [];
        for await (const o of ctx.objects.listAll(opts.bucket, { ...(prefix ? { prefix } : {}), metadata: false })) {
          objects.push(o);
        }
        show(
          ctx.json,
          objects,
          ['key', 'size', 'modified'],
          objects.map((o) => [o.key, o.size, o.last_modified]),
        );
      }),
    );
  copyCommand(program, storage, 'cp');
  copyCommand(program, storage, 'mv');
  storage
    .command('presign <path>')
    .description(
      'a time-limited URL of an object at the object store (gpu:models/a.bin; the gpu: may be left out), for a ' +
        'program without your credentials: to download it (GET, as aws s3 presign), or with --put to upload to it ' +
        '(curl -T <file> <url>). Anyone holding the URL may use it until it expires',
    )
    .option('--put', 'a URL to upload the object with (PUT) instead of to download it')
    .option(
      '--expires-in <duration>',
      'how long it is valid: seconds, or 15m, 1h30m; default 15m, at most 7d',
      expiresIn,
    )
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(
      action(async (at: string, opts: { put?: boolean; expiresIn?: string; bucket?: string }) => {
        const ctx = context(program);
        const key = namedKey(at);
        if (isPrefix(key)) throw new UsageError(`${shown(key)} is a folder: name an object`);
        const ref = refOf(key, opts.bucket);
        // A URL to download an object that is not there would only answer 404 later: said now.
        if (!opts.put) await headOf(ctx, ref);
        const signed = await ctx.objects.presign(ref, {
          method: opts.put ? 'PUT' : 'GET',
          ...(opts.expiresIn ? { expiry: opts.expiresIn } : {}),
        });
        if (ctx.json) printJson(signed);
        else process.stdout.write(`${signed.url}\n`);
      }),
    );
  storage
    .command('rm <path>')
    .description(
      'delete an object (gpu:models/a.bin; the gpu: may be left out); with -r, every object under a prefix ' +
        '(gpu:models/; or the object itself where nothing is under it)',
    )
    .option('-r, --recursive', 'delete every object under the prefix')
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(
      action(async (at: string, opts: { bucket?: string; recursive?: boolean }) => {
        const ctx = context(program);
        const key = namedKey(at);
        const deleted = opts.recursive ? await removeAll(ctx, key, opts.bucket) : [await removeOne(ctx, key, opts)];
        if (ctx.json) printJson({ deleted });
        else process.stdout.write(deleted.map((k) => `deleted ${shown(k)}\n`).join(''));
      }),
    );
  storage
    .command('usage')
    .description(
      'what storing your objects cost: one charge per period the storage service measured (newest first), its ' +
        'GB-hours at the rate of the time (gpu rates), paid from your wallet (what it could not pay: unpaid); every ' +
        'page, or the first --limit',
    )
    .option(
      '--from <date>',
      'periods starting at or after this (2026-11-01, or 2026-11-01T12:00:00Z)',
      moment('--from'),
    )
    .option('--to <date>', 'periods starting before this', moment('--to'))
    .option('--user <user-id>', "for admins: this user's charges (default: yours; an admin's: everyone's)")
    .option('--limit <n>', 'at most this many', count('--limit'))
    .option('--page-size <n>', 'how many one request asks for (1-1000)', count('--page-size', 1000), 1000)
    .action(async (opts: { from?: string; to?: string; user?: string; limit?: number; pageSize: number }) => {
      const ctx = context(program);
      const charges = await everyPage(
        (cursor) =>
          ctx.billing.GET('/api/v1/billing/storage-usage', {
            params: {
              query: {
                limit: pageRequest(opts),
                ...(cursor ? { cursor } : {}),
                ...(opts.from ? { from: opts.from } : {}),
                ...(opts.to ? { to: opts.to } : {}),
                ...(opts.user ? { user_id: opts.user } : {}),
              },
            },
          }),
        opts.limit,
      );
      if (!ctx.json && charges.length === 0) {
        process.stderr.write('no storage charges (in those periods)\n');
        return;
      }
      show(
        ctx.json,
        charges,
        ['from', 'to', 'stored', 'GB-hours', 'rate', 'cost', 'paid', 'unpaid'],
        charges.map((c) => [
          time(c.period_start),
          time(c.period_end),
          bytes(c.bytes),
          c.gb_hours,
          tokens(c.rate_per_gb_hour),
          tokens(c.cost),
          tokens(c.charged),
          tokensIfAny(c.unpaid),
        ]),
      );
    });
}

/** `aws s3 presign`'s `--expires-in` in seconds, or the service's own form (`15m`, `1h30m`). */
function expiresIn(value: string): string {
  if (/^\d+$/.test(value)) return `${value}s`;
  if (/^(\d+[smhd])+$/.test(value)) return value;
  throw new InvalidArgumentError('a duration such as 3600 (seconds), 15m or 1h30m');
}

async function removeOne(ctx: Context, key: string, opts: { bucket?: string }): Promise<string> {
  if (isPrefix(key)) throw new UsageError(`${shown(key)} is a folder: delete what is under it with rm -r`);
  const ref = refOf(key, opts.bucket);
  try {
    await ctx.objects.remove(ref);
  } catch (err) {
    throw err instanceof ApiError && err.status === 404 ? objectNotFound(ref) : err;
  }
  return key;
}

/** Every object under the prefix `key` names (`rm -r` of an object's own key: the object): the keys deleted. */
async function removeAll(ctx: Context, key: string, bucket?: string): Promise<string[]> {
  const prefix = asPrefix(key);
  const keys: string[] = [];
  for await (const o of ctx.objects.listAll(bucket, { ...(prefix ? { prefix } : {}), metadata: false })) {
    keys.push(o.key);
  }
  if (keys.length === 0) {
    if (!isPrefix(key)) return [await removeOne(ctx, key, { ...(bucket ? { bucket } : {}) })];
    throw nothingUnder(key);
  }
  const deleted: string[] = [];
  let failure: unknown;
  await forEachLimited(keys, DELETES_AT_ONCE, async (k) => {
    if (failure !== undefined) return;
    try {
      await ctx.objects.remove(refOf(k, bucket));
      deleted.push(k);
    } catch (err) {
      // Deleted meanwhile (by another run): gone all the same.
      if (err instanceof ApiError && err.status === 404) deleted.push(k);
      else failure ??= err;
    }
  });
  if (failure !== undefined) {
    process.stderr.write(`gpu: ${deleted.length} of ${keys.length} objects under ${shown(prefix)} deleted\n`);
    throw failure;
  }
  return deleted.sort();
}

/**
 * `mv`'s removal of a source once it is copied: a local file, or an object of the copy's bucket, only when it is still
 * the version copied (a file written to since, an object replaced since, is kept: its new bytes were not copied); one
 * gone already is moved. A source not removed is said on standard error (its copy stands) and counted in `kept`.
 */
function removing(ctx: Context, bucket: string | undefined, kept: { count: number }) {
  return async (source: CopySource) => {
    const name = 'local' in source ? source.local : shown(source.key);
    try {
      if ('local' in source) {
        const now = await stat(source.local).catch((err: unknown) => {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
          throw localError(err, 'read', source.local);
        });
        // Gone already: moved all the same, as an object deleted meanwhile is.
        if (now === undefined) return;
        if (now.size !== source.size || now.mtimeMs !== source.mtimeMs)
          throw new Error('it changed since it was copied');
        await locally('remove', source.local, () => rm(source.local));
        return;
      }
      // Deleted only while it is the object copied (If-Match: one request, the store's check where it has one).
      if (source.etag === null) throw new Error('the store named no version (ETag) of it to delete');
      await ctx.objects.remove(refOf(source.key, bucket), { ifMatch: source.etag }).catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 412) throw new Error('it was replaced since it was copied');
        // Gone already: moved all the same.
        if (!(err instanceof ApiError && err.status === 404)) throw err;
      });
    } catch (err) {
      kept.count++;
      const why = err instanceof ApiError ? (err.problem.detail ?? err.message) : (err as Error).message;
      process.stderr.write(`gpu: ${name} copied, not deleted: ${why}\n`);
    }
  };
}

const MV_EXAMPLES = [
  '',
  'Examples:',
  '  gpu storage mv model.pt gpu:models/             stored as models/model.pt, then ./model.pt deleted',
  '  gpu storage mv -r gpu:runs/ckpt/ gpu:keep/ckpt  keep/ckpt/<its objects>, each copied by the store, then deleted',
  '  gpu storage mv -r gpu:outputs/ ./outputs        written to ./outputs/<its files>, each object then deleted',
];

/** `storage cp` and `storage mv` (a copy that deletes each source once copied). */
function copyCommand(program: Command, storage: Command, verb: 'cp' | 'mv') {
  // --exclude and --include in the order given (each option keeps its own values; the order is what decides).
  const filters: CopyFilter[] = [];
  const addFilter = (include: boolean, pattern: string) => {
    filters.push(copyFilter(include, pattern));
    return filters;
  };
  const command =
    verb === 'cp'
      ? storage
          .command('cp <from> <to>')
          .summary('copy files and folders (-r) up to gpu:<key> or gpu:<prefix>/, down from them, or between them')
      : storage
          .command('mv <from> <to>')
          .summary('move files and folders (-r): cp, then each source deleted once it is copied (as aws s3 mv)');
  command
    .description(
      (verb === 'mv'
        ? 'move: copy as cp does (below), then delete each source file or object as soon as it is copied, as aws ' +
          's3 mv does (not - either way); a file that fails to copy is kept where it was. '
        : '') +
        'copy a file or (with -r) a folder up, down or within your objects, as cp, scp and aws s3 cp do: one side ' +
        'or both a gpu: path, the other a local one (-: standard input up, standard output down); gpu: to gpu: ' +
        'is copied by the object store itself, no byte through this machine. A file copied to a destination ' +
        "ending in / (gpu:<prefix>/, or a local directory) takes the file's name; -r copies what is under a local folder or a " +
        'remote prefix, the destination being the copy (as aws s3 cp --recursive), 4 files at once. A transfer of 1 ' +
        'MiB or more shows a progress bar when standard error is a terminal (not with --json). A file of 64 MiB or ' +
        'more goes up in parts, 4 at once, resumably: run the same command again after an interruption and only the ' +
        'parts that did not arrive are sent (not standard input, which cannot be read again). A download is written ' +
        'to a temporary file beside its target (.<name>.<tag>.gpu-download), renamed when whole: run again, it asks ' +
        'only for the bytes still missing',
    )
    .addHelpText(
      'after',
      (verb === 'mv'
        ? MV_EXAMPLES
        : [
            '',
            'Examples:',
            '  gpu storage cp data.csv gpu:datasets/           stored as datasets/data.csv',
            '  gpu storage cp gpu:datasets/data.csv .          written to ./data.csv',
            '  gpu storage cp gpu:logs/out.txt -               to standard output',
            '  tar c runs | gpu storage cp - gpu:runs.tar      from standard input (named: it has no name of its own)',
            '  gpu storage cp -r checkpoints gpu:runs/ckpt/    runs/ckpt/<its files> (the destination is the copy)',
            '  gpu storage cp -r gpu:runs/ckpt/ ./ckpt         ./ckpt/<its files> (run again: the same files)',
            '  gpu storage cp -r gpu:runs/ckpt/ gpu:keep/ckpt  keep/ckpt/<its objects>',
            "  gpu storage cp -r runs gpu:runs/ --exclude '*' --include '*.pt'   the .pt files alone, at any depth",
          ]
      ).join('\n'),
    )
    .option('-r, --recursive', 'copy folders: everything under a local folder or a remote prefix')
    .option(
      '--exclude <pattern>',
      'with -r: leave out the files whose path in the folder matches (a shell pattern: * matches / too), repeatable',
      (pattern: string) => addFilter(false, pattern),
    )
    .option(
      '--include <pattern>',
      'with -r: copy those that match after all; the filters apply in order, the last that matches deciding',
      (pattern: string) => addFilter(true, pattern),
    )
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(
      action(async (from: string, to: string, opts: { bucket?: string; recursive?: boolean }) => {
        if (filters.length > 0 && !opts.recursive) {
          throw new UsageError('--exclude and --include choose files of a folder: give them with -r');
        }
        const ctx = context(program);
        const up = remoteKey(to);
        const down = remoteKey(from);
        if (up === undefined && down === undefined) {
          throw new UsageError(`name a remote side (gpu:<key>): ${verb} copies up, down, or within your objects`);
        }
        const kept = { count: 0 };
        if (verb === 'mv' && (from === '-' || to === '-')) {
          throw new UsageError('mv moves files and objects: - (standard input or output) is for cp');
        }
        const copy = {
          ...(opts.bucket ? { bucket: opts.bucket } : {}),
          recursive: opts.recursive === true,
          filters,
          ...(verb === 'mv' ? { removeSource: removing(ctx, opts.bucket, kept) } : {}),
        };
        // What was copied, printed the same whether every file was or some failed (said on standard error).
        const report = (copied: unknown[]) => {
          if (up === undefined) {
            if (ctx.json && to !== '-') printJson(copy.recursive ? copied : copied[0]);
            return;
          }
          const stored = copied as ObjectInfo[];
          show(
            ctx.json,
            copy.recursive ? stored : stored[0],
            ['key', 'size', 'etag'],
            stored.map((info) => [info.key, info.size, info.etag]),
          );
        };
        try {
          if (up === undefined) report(await copyDown(ctx, down!, to, copy));
          else report(down !== undefined ? await copyWithin(ctx, down, up, copy) : await copyUp(ctx, from, up, copy));
        } catch (err) {
          if (err instanceof CopyIncomplete && (ctx.json || err.copied.length > 0)) report(err.copied);
          throw err;
        }
        if (kept.count > 0) {
          throw new Error(`${kept.count} copied, not deleted (said above): their copies stand, the sources are kept`);
        }
      }),
    );
}
