/**
 * `gpu`: the platform's command line for renters and providers (`pnpm gpu ...`, or the package's `gpu` bin), every call
 * through the typed client (`@gpu/client`) to the platform's one origin, the gateway: `--url`, else `GPU_URL`, else
 * the URL saved by `gpu login`, else `http://127.0.0.1:8080` (`pnpm start`'s gateway).
 *
 * Conventions: `--help` on every command; exit status 0, 1 (the platform refused or failed: one line on standard error
 * with the problem's code and detail), 2 (a usage error); `--json` prints the platform's answer as JSON for scripts;
 * no colour (`NO_COLOR` holds trivially); no secret is ever printed but the key `gpu keys create` makes, once.
 */
import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError, authClient, billingClient, objectStore, registryClient, unwrap } from '@gpu/client';
import { isScope, SCOPE_MEANINGS, SCOPES } from '@gpu/common';
import Table from 'cli-table3';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { type CliConfig, readConfig, writeConfig } from './config.ts';
import { tokenSource } from './session.ts';

const DEFAULT_URL = 'http://127.0.0.1:8080';

interface Globals {
  url?: string;
  json?: boolean;
}

/** Everything a command needs: the URL, the saved configuration, the clients with the caller's token. */
function context(program: Command) {
  const globals = program.opts<Globals>();
  const env = process.env;
  const config = readConfig(env);
  const url = (globals.url || env.GPU_URL || config.url || DEFAULT_URL).replace(/\/$/, '');
  const token = tokenSource(url, env, config);
  return {
    url,
    env,
    config,
    json: globals.json === true,
    auth: authClient({ baseUrl: url, token }),
    registry: registryClient({ baseUrl: url, token }),
    billing: billingClient({ baseUrl: url, token }),
    objects: objectStore({ baseUrl: url, token }),
  };
}

/** Prints `rows` as a table (no colour), or `data` as JSON with --json. */
function show(json: boolean, data: unknown, head: string[], rows: (string | number | null | undefined)[][]) {
  if (json) {
    process.stdout.write(`${JSON.stringify(data, null, 2)}\n`);
    return;
  }
  const table = new Table({ head, style: { head: [], border: [] } });
  for (const row of rows) table.push(row.map((v) => (v === null || v === undefined ? '' : String(v))));
  process.stdout.write(`${table.toString()}\n`);
}

/**
 * Reads a secret from standard input (its first line), never from the command line (where `ps` shows it); typed at a
 * terminal, it is not echoed.
 */
async function stdinLine(what: string): Promise<string> {
  const stdin = process.stdin;
  if (stdin.isTTY) {
    process.stderr.write(`${what}: `);
    stdin.setRawMode(true);
  }
  let text = '';
  try {
    for await (const chunk of stdin) {
      text += String(chunk).replaceAll('\r', '\n');
      if (text.includes('\n') || text.includes('\u0003')) break;
    }
  } finally {
    if (stdin.isTTY) {
      stdin.setRawMode(false);
      process.stderr.write('\n');
    }
    stdin.pause();
  }
  if (text.includes('\u0003')) throw new UsageError('interrupted');
  const line = text.split('\n')[0]!.trim();
  if (!line) throw new UsageError(`no ${what} on standard input`);
  return line;
}

/** A whole number option, or a usage error naming it. */
function count(name: string) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} takes a whole number of at least 1`);
    return n;
  };
}

class UsageError extends Error {}

function build(): Command {
  const program = new Command('gpu')
    .description("The GPU rental platform's command line: offers, sessions, wallets, keys")
    .option('--url <url>', 'the platform (its gateway); default GPU_URL, the saved one, or http://127.0.0.1:8080')
    .option('--json', 'print the answer as JSON')
    .showHelpAfterError()
    .exitOverride();

  program
    .command('login')
    .description('sign in and save who you are (an API key, or a refresh token: never your password)')
    .option('--email <address>', 'sign in as this user; the password from GPU_PASSWORD or standard input')
    .option('--api-key', 'use an API key, from GPU_API_KEY or standard input')
    .action(async (opts: { email?: string; apiKey?: boolean }) => {
      const ctx = context(program);
      if (Boolean(opts.email) === Boolean(opts.apiKey)) throw new UsageError('give --email <address> or --api-key');
      let saved: CliConfig;
      if (opts.apiKey) {
        const apiKey = ctx.env.GPU_API_KEY || (await stdinLine('API key'));
        // The key is tried before it is saved.
        const env = { ...ctx.env, GPU_API_KEY: apiKey };
        await tokenSource(ctx.url, env, {}).get();
        saved = { url: ctx.url, api_key: apiKey };
      } else {
        const password = ctx.env.GPU_PASSWORD || (await stdinLine('password'));
        const pair = unwrap(
          await authClient({ baseUrl: ctx.url }).POST('/api/v1/auth/login', {
            body: { email: opts.email!, password },
          }),
        );
        saved = { url: ctx.url, email: opts.email!, refresh_token: pair.refresh_token };
      }
      writeConfig(ctx.env, saved);
      process.stdout.write(`logged in to ${ctx.url}${saved.email ? ` as ${saved.email}` : ' with an API key'}\n`);
    });

  program
    .command('logout')
    .description('forget the saved sign-in (its refresh tokens are revoked) or API key')
    .action(async () => {
      const ctx = context(program);
      // Forgotten here whatever happens there: a platform out of reach still gets its refresh token revoked if it can.
      const revoked = ctx.config.refresh_token
        ? await authClient({ baseUrl: ctx.url })
            .POST('/api/v1/auth/logout', { body: { refresh_token: ctx.config.refresh_token } })
            .then((r) => r.response.ok)
            .catch(() => false)
        : true;
      writeConfig(ctx.env, { url: ctx.url });
      process.stdout.write(
        revoked ? 'logged out\n' : 'logged out here (the platform could not be reached to revoke the sign-in)\n',
      );
    });

  program
    .command('whoami')
    .description('who the saved sign-in or key acts as')
    .action(async () => {
      const ctx = context(program);
      const me = unwrap(await ctx.auth.GET('/api/v1/auth/me'));
      show(ctx.json, me, ['id', 'email', 'roles'], [[me.id, me.email, me.roles.join(', ')]]);
    });

  program
    .command('offers')
    .description('search the market: machines with free GPUs, cheapest first by default')
    .option('--gpu-model <model>', 'e.g. H100, A100, "RTX 4090"')
    .option('--min-free-gpus <n>', 'at least this many free GPUs', count('--min-free-gpus'))
    .option('--max-price <tokens>', 'at most this price per GPU-hour')
    .option('--min-reliability <score>', 'at least this reliability (0-1)')
    .option('--region <region>')
    .addOption(new Option('--sort <order>', 'the order').choices(['price', '-price', 'reliability', '-reliability']))
    .option('--limit <n>', 'at most this many (1-1000)', count('--limit'), 20)
    .action(async (opts: Record<string, string | number | undefined>) => {
      const ctx = context(program);
      const query = {
        ...(opts.gpuModel ? { gpu_model: opts.gpuModel } : {}),
        ...(opts.minFreeGpus ? { min_free_gpus: opts.minFreeGpus } : {}),
        ...(opts.maxPrice ? { max_price: opts.maxPrice } : {}),
        ...(opts.minReliability !== undefined ? { min_reliability: Number(opts.minReliability) } : {}),
        ...(opts.region ? { region: opts.region } : {}),
        ...(opts.sort ? { sort: opts.sort } : {}),
        limit: Number(opts.limit),
      };
      const offers = unwrap(await ctx.registry.GET('/offers', { params: { query: query as never } }));
      show(
        ctx.json,
        offers,
        ['machine', 'gpu', 'free', 'price/GPU-h', 'reliability', 'region'],
        offers.map((o) => [
          o.provider_id,
          o.gpu_model,
          `${o.free_gpus}/${o.gpu_count}`,
          o.price_per_gpu_hour,
          o.reliability.score,
          o.region,
        ]),
      );
    });

  const keys = program.command('keys').description('API keys for your programs (managed with your sign-in)');
  keys
    .command('list')
    .description('your keys (never their secrets)')
    .option('--all', 'revoked ones too')
    .action(async (opts: { all?: boolean }) => {
      const ctx = context(program);
      const list = unwrap(
        await ctx.auth.GET('/api/v1/auth/keys', { params: { query: { include_revoked: opts.all === true } } }),
      );
      show(
        ctx.json,
        list,
        ['id', 'name', 'prefix', 'scopes', 'last used', 'expires', 'revoked'],
        list.map((k) => [k.id, k.name, k.prefix, k.scopes.join(' '), k.last_used_at, k.expires_at, k.revoked_at]),
      );
    });
  keys
    .command('create <name>')
    .description(
      `a new key; its secret is printed this once. Scopes: ${SCOPES.map((s) => `${s} (${SCOPE_MEANINGS[s]})`).join('; ')}`,
    )
    .requiredOption('--scope <scope...>', `what it may do: ${SCOPES.join(', ')}`)
    .option('--expires-at <time>', 'when it stops working (RFC 3339)')
    .action(async (name: string, opts: { scope: string[]; expiresAt?: string }) => {
      const bad = opts.scope.filter((s) => !isScope(s));
      if (bad.length > 0) throw new UsageError(`unknown scope ${bad.join(', ')}: one of ${SCOPES.join(', ')}`);
      const ctx = context(program);
      const created = unwrap(
        await ctx.auth.POST('/api/v1/auth/keys', {
          body: { name, scopes: opts.scope as never, ...(opts.expiresAt ? { expires_at: opts.expiresAt } : {}) },
        }),
      );
      if (ctx.json) show(true, created, [], []);
      else process.stdout.write(`${created.api_key}\n(key ${created.key.id}: shown this once, store it now)\n`);
    });
  keys
    .command('revoke <id>')
    .description('revoke a key at once')
    .action(async (id: string) => {
      const ctx = context(program);
      const revoked = unwrap(await ctx.auth.DELETE('/api/v1/auth/keys/{id}', { params: { path: { id } } }));
      show(ctx.json, revoked, ['id', 'name', 'revoked'], [[revoked.id, revoked.name, revoked.revoked_at]]);
    });

  program
    .command('sessions')
    .description('your rental sessions, newest first')
    .option('--status <status>', 'active, grace_period, completed or terminated')
    .action(async (opts: { status?: string }) => {
      const ctx = context(program);
      const list = unwrap(
        await ctx.billing.GET('/api/v1/billing/sessions', {
          params: { query: (opts.status ? { status: [opts.status] } : {}) as never },
        }),
      );
      show(
        ctx.json,
        list,
        ['id', 'machine', 'gpus', 'status', 'started', 'cost'],
        list.map((s) => [s.id, s.provider_id, s.gpu_count, s.status, s.started_at, s.total_cost]),
      );
    });

  program
    .command('quote')
    .description("price a rental of a machine's GPUs: its hourly rate and what a duration costs")
    .requiredOption('--machine <id>', 'the machine (its provider ID, from gpu offers)')
    .option('--gpus <n>', 'how many of its GPUs', count('--gpus'), 1)
    .requiredOption('--gpu-model <model>', 'the model of its GPUs (H100, A100, ...)')
    .option('--hours <n>', 'for how long', '1')
    .action(async (opts: { machine: string; gpus: number; gpuModel: string; hours: string }) => {
      const ctx = context(program);
      const q = unwrap(
        await ctx.billing.POST('/api/v1/pricing/calculate', {
          body: {
            provider_id: opts.machine,
            gpu_count: opts.gpus,
            gpu_model: opts.gpuModel,
            duration_hours: opts.hours,
          } as never,
        }),
      );
      show(
        ctx.json,
        q,
        ['gpus', 'model', 'per hour', 'hours', 'total'],
        [[q.gpu_count, q.gpu_model, q.total_hourly_rate, opts.hours, q.total_cost]],
      );
    });

  program
    .command('end <session-id>')
    .description('end a rental: billed for its started minutes, the rest of the hold released')
    .action(async (sessionId: string) => {
      const ctx = context(program);
      const ended = unwrap(await ctx.billing.POST('/api/v1/billing/end-session', { body: { session_id: sessionId } }));
      const r = ended.billing_record;
      show(ctx.json, ended, ['session', 'minutes', 'cost'], [[sessionId, r.billed_minutes, r.total_cost]]);
    });

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
      'copy a file up (gpu cp data.csv gpu:datasets/data.csv) or down (gpu cp gpu:out.txt out.txt; - : standard output)',
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
        const info = await ctx.objects.upload(ref(up), createReadStream(from), { contentLength: size });
        show(ctx.json, info, ['key', 'size', 'etag'], [[info.key, info.size, info.etag]]);
        return;
      }
      const got = await ctx.objects.download(ref(down!));
      const sink = to === '-' ? process.stdout : createWriteStream(to);
      await pipeline(Readable.fromWeb(got.body as import('node:stream/web').ReadableStream), sink, { end: to !== '-' });
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

  const wallet = program.command('wallet').description('your token wallet');
  wallet
    .command('balance <wallet-id>')
    .description('what the wallet holds: total, available, locked by running sessions, pending')
    .action(async (walletId: string) => {
      const ctx = context(program);
      const b = unwrap(
        await ctx.billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: walletId } } }),
      );
      show(ctx.json, b, ['total', 'available', 'locked', 'pending'], [[b.total, b.available, b.locked, b.pending]]);
    });

  return program;
}

/** One line for a failure: the problem's code and detail (and its hint), never a stack. */
function describe(err: unknown, url: string): string {
  if (err instanceof ApiError) {
    const p = err.problem as { code?: string; detail?: string; title?: string; hint?: string };
    return `${p.code ?? err.status}: ${p.detail ?? p.title ?? 'refused'}${p.hint ? ` (${p.hint})` : ''}`;
  }
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (err instanceof TypeError && cause) return `cannot reach ${url}: ${cause.code ?? cause.message}`;
  return (err as Error).message;
}

async function main(argv: string[]): Promise<number> {
  const program = build();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here too, after printing.
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.exitCode === 0 ? 0 : 2;
    }
    const globals = program.opts<Globals>();
    process.stderr.write(`gpu: ${describe(err, globals.url || process.env.GPU_URL || DEFAULT_URL)}\n`);
    return err instanceof UsageError ? 2 : 1;
  }
}

process.exitCode = await main(process.argv);
