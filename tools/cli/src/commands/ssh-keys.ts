/**
 * Your SSH public keys at the platform (`ssh-key add|list|rm`), the keys that let you reach what you rent with
 * OpenSSH's own client. Added and removed with your sign-in (an API key may only list them). Only a public key is ever
 * sent: a file that holds a private key is refused here, before anything leaves the machine.
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { context, show, UsageError } from '../cli.ts';
import { everyPage } from '../paging.ts';

/** The key `ssh-keygen -t ed25519` makes by default. */
const DEFAULT_KEY = join('~', '.ssh', 'id_ed25519.pub');
/** More than any public key (auth takes lines of 8,192 characters at most): a bigger file is not one. */
const MAX_FILE_BYTES = 64 * 1024;

/** The text of `file` (`-`: standard input; `~/` is the home folder), refused when it holds a private key. */
async function publicKeyText(file: string): Promise<string> {
  let text: string;
  if (file === '-') {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of process.stdin) {
      size += (chunk as Buffer).length;
      if (size > MAX_FILE_BYTES) throw new UsageError('standard input holds more than a public key');
      chunks.push(chunk as Buffer);
    }
    text = Buffer.concat(chunks).toString('utf8');
  } else {
    const path = file.startsWith('~/') ? join(homedir(), file.slice(2)) : file;
    const data = await readFile(path).catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(
        err.code === 'ENOENT'
          ? `${file} does not exist${file === DEFAULT_KEY ? ' (make a key with ssh-keygen -t ed25519, or name its .pub file)' : ''}`
          : `cannot read ${file}: ${err.code ?? err.message}`,
      );
    });
    if (data.length > MAX_FILE_BYTES) throw new UsageError(`${file} is larger than a public key`);
    text = data.toString('utf8');
  }
  // Never sent: whoever holds a private key is whoever it lets in.
  if (/PRIVATE KEY|PuTTY-User-Key-File/.test(text)) {
    throw new UsageError(`${file} is a private key: give its public half (the .pub file), never the private key`);
  }
  if (text.trim() === '') throw new UsageError(`${file} is empty`);
  return text;
}

export function sshKeyCommands(program: Command) {
  const keys = program
    .command('ssh-key')
    .description('your SSH public keys, to reach what you rent with ssh (added and removed with your sign-in)');
  keys
    .command('add [file]')
    .description(
      `register a public key: an OpenSSH .pub file (default ${DEFAULT_KEY}), or - for standard input; ` +
        'ssh-ed25519, ecdsa-sha2-nistp256/384/521, or ssh-rsa of at least 2048 bits. Its comment names it',
    )
    .option('--name <name>', "what to call it (default: the key's comment)")
    .action(async (file: string | undefined, opts: { name?: string }) => {
      const publicKey = await publicKeyText(file ?? DEFAULT_KEY);
      const ctx = context(program);
      const key = unwrap(
        await ctx.auth.POST('/api/v1/auth/ssh-keys', {
          body: { public_key: publicKey, ...(opts.name === undefined ? {} : { name: opts.name }) },
        }),
      );
      show(ctx.json, key, ['id', 'name', 'type', 'fingerprint'], [[key.id, key.name, key.type, key.fingerprint]]);
    });
  keys
    .command('list', { isDefault: true })
    .description('your SSH keys, oldest first, with their fingerprints as ssh-keygen -lf prints them')
    .action(async () => {
      const ctx = context(program);
      const list = await everyPage((cursor) =>
        ctx.auth.GET('/api/v1/auth/ssh-keys', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
      );
      show(
        ctx.json,
        list,
        ['id', 'name', 'type', 'fingerprint', 'added'],
        list.map((k) => [k.id, k.name, k.type, k.fingerprint, k.created_at]),
      );
    });
  keys
    .command('rm <id>')
    .description('remove a key: it lets no one in from then on')
    .action(async (id: string) => {
      const ctx = context(program);
      unwrap(await ctx.auth.DELETE('/api/v1/auth/ssh-keys/{id}', { params: { path: { id } } }));
      show(ctx.json, { id, removed: true }, ['id', 'removed'], [[id, 'yes']]);
    });
}
