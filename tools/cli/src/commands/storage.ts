/**
 * `storage ls|cp|rm`: your objects, keys of your folder in the platform bucket (or of a bucket of yours), streamed
 * both ways and never held whole; a large transfer shows its progress on a terminal.
 */
import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { ObjectInfo } from '@gpu/client';
import type { Command } from 'commander';
import { context, show, UsageError } from '../cli.ts';
import { transferProgress } from '../progress.ts';
import { RESUMABLE_FROM, resumableUpload } from '../resumable.ts';

export function storageCommands(program: Command) {
  const storage = program
    .command('storage')
    .description('your objects: keys of your folder in the platform bucket, or of a bucket of yours (--bucket)');
  storage
    .command('ls [prefix]')
    .description('list objects (every page), by key')
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(async (prefix: string | undefined, opts: { bucket?: string }) => {
      const ctx = context(program);
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
    });
  storage
    .command('cp <from> <to>')
    .description(
      'copy a file up (gpu cp data.csv gpu:datasets/data.csv) or down (gpu cp gpu:out.txt out.txt; - : standard ' +
        'output); a transfer of 1 MiB or more shows a progress bar when standard error is a terminal (not with --json). ' +
        'A file of 64 MiB or more goes up in parts, resumably: after an interruption, run the same command again and ' +
        'only the parts that did not arrive are sent',
    )
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(async (from: string, to: string, opts: { bucket?: string }) => {
      const ctx = context(program);
      const remote = (s: string) => (s.startsWith('gpu:') ? s.slice(4) : undefined);
      const ref = (key: string) => ({ ...(opts.bucket ? { bucket: opts.bucket } : {}), key });
      const up = remote(to);
      const down = remote(from);
      if ((up === undefined) === (down === undefined)) {
        throw new UsageError('one side is remote (gpu:<key>), the other a local file');
      }
      if (up !== undefined) {
        const size = statSync(from).size;
        const progress = transferProgress(`${from} -> gpu:${up}`, size, { json: ctx.json });
        let info: ObjectInfo;
        try {
          if (size >= RESUMABLE_FROM) {
            info = await resumableUpload(ctx, from, ref(up), progress);
          } else {
            const counted = progress.counter();
            // A file that cannot be read ends the upload with its error (pipeline destroys what follows it).
            pipeline(createReadStream(from), counted).catch(() => {});
            info = await ctx.objects.upload(ref(up), counted, { contentLength: size });
          }
        } finally {
          progress.stop();
        }
        show(ctx.json, info, ['key', 'size', 'etag'], [[info.key, info.size, info.etag]]);
        return;
      }
      const got = await ctx.objects.download(ref(down!));
      // The bytes on a terminal's standard output leave no room for a bar beside them.
      const toTerminal = to === '-' && process.stdout.isTTY === true;
      const progress = transferProgress(`gpu:${down} -> ${to}`, got.contentLength, { json: ctx.json || toTerminal });
      const sink = to === '-' ? process.stdout : createWriteStream(to);
      try {
        await pipeline(Readable.fromWeb(got.body as WebReadableStream), progress.counter(), sink, { end: to !== '-' });
      } finally {
        progress.stop();
      }
      if (to !== '-') process.stderr.write(`${down} -> ${to} (${got.contentLength ?? '?'} bytes)\n`);
    });
  storage
    .command('rm <key>')
    .description('delete an object')
    .option('--bucket <name>', 'a bucket of yours instead of your folder')
    .action(async (key: string, opts: { bucket?: string }) => {
      const ctx = context(program);
      await ctx.objects.remove({ ...(opts.bucket ? { bucket: opts.bucket } : {}), key });
      if (!ctx.json) process.stdout.write(`deleted ${key}\n`);
    });
}
