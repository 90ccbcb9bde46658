/**
 * Rentals: `sessions` (yours), `rent` (start one, optionally running a workload), `logs` (a workload's logs, or
 * followed with -f), `run` (rent with a workload, follow it, fetch its outputs, exit with its exit code), `end`.
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import { parseDuration } from '@gpu/common/duration';
import { type Command, InvalidArgumentError } from 'commander';
import { Decimal } from 'decimal.js';
import {
  amount,
  type Context,
  collect,
  context,
  count,
  ExitStatus,
  idempotencyKey,
  listOf,
  printJson,
  show,
  showRecord,
  UsageError,
} from '../cli.ts';
import { duration, time, tokens } from '../format.ts';
import { everyPage } from '../paging.ts';
import { endedBeforeRunning, untilRunning } from '../waiting.ts';
import { payingWallet } from '../wallet-choice.ts';
import {
  collector,
  downloadOutputs,
  exitStatusOf,
  machineGone,
  printLogs,
  type Workload,
  workloadOf,
} from '../workload.ts';

type WorkloadSpec = BillingSchemas['WorkloadSpecInput'];
type Session = BillingSchemas['Session'];

/** What `sessions --status` takes. */
const SESSION_STATUSES = ['active', 'grace_period', 'completed', 'terminated', 'running'];

/** The longest a workload may run (billing's bound: a week). */
const MAX_RUNTIME_S = 604_800;
/** How long a workload runs when `--max-runtime` is not given. */
const DEFAULT_RUNTIME_S = 3600;

/** What `workloadOptions` reads. */
export interface WorkloadOptions {
  env?: string[];
  input?: string[];
  outputPrefix?: string;
  /** Seconds; undefined: not given (the workload's default, an hour). */
  maxRuntime?: number;
  network?: boolean;
  image?: string;
}

interface RentOptions extends WorkloadOptions {
  machine: string;
  gpuModel: string;
  gpus: number;
  wallet?: string;
  maxRate?: string;
  spendCap?: string;
  bid?: string;
  idempotencyKey?: string;
  idle?: boolean;
}

/** A duration in whole seconds: `90` (seconds), `90s`, `15m`, `2h30m`. */
function seconds(value: string): number {
  const ms = /^\d+$/.test(value) ? Number(value) * 1000 : parseDuration(value);
  const s = ms === undefined ? Number.NaN : Math.ceil(ms / 1000);
  if (!(s >= 1 && s <= MAX_RUNTIME_S)) {
    throw new InvalidArgumentError(`a duration from 1s to a week: 3600, 90s, 15m, 2h30m`);
  }
  return s;
}

/** The options of a rental and of its workload, shared by `rent` and `run`. */
function rentalOptions(command: Command): Command {
  return workloadOptions(
    command
      .requiredOption('--machine <id>', 'the machine (its provider ID, from gpu offers)')
      .requiredOption('--gpu-model <model>', 'the model of its GPUs to rent (H100, A100, ...)')
      .option('--gpus <n>', 'how many of its GPUs', count('--gpus'), 1)
      .option('--wallet <wallet-id>', 'the wallet that pays (default: the default wallet, gpu wallet use)')
      .option(
        '--max-rate <tokens>',
        'the most you accept per hour for them all (default: the price quoted now)',
        amount('--max-rate'),
      )
      .option('--spend-cap <tokens>', 'the most the session may cost in all: it ends there', amount('--spend-cap'))
      .option(
        '--bid <tokens>',
        'interruptible, at this price per GPU-hour (the machine must take bids): cheaper, but an on-demand rental or ' +
          'a higher bid may take the GPUs back, with notice',
        amount('--bid'),
      )
      .option(
        '--idempotency-key <key>',
        'a key of yours for this rental: the same command with the same key again starts no second one',
      ),
  ).option(
    '--idle',
    'an idle workload to reach with gpu shell and gpu exec (no command of its own; billed as running)',
  );
}

/** The options of a workload, shared by rentals and jobs. */
export function workloadOptions(command: Command): Command {
  return command
    .option('--env <K=V>', 'an environment variable of the workload (repeatable)', collect)
    .option('--input <key>', 'an object of yours the workload reads at /work/inputs/<key> (repeatable)', collect)
    .option('--output-prefix <prefix>', 'where its logs and outputs go in your folder (default sessions/<id>/)')
    .option(
      '--max-runtime <duration>',
      'the workload is stopped after running this long (3600, 90s, 2h; default 1h)',
      seconds,
    )
    .option('--network', 'let the workload reach the network (default: none)')
    .option(
      '--image <reference>',
      'run an OCI image in a container (the machine needs a container runtime); a command after -- replaces its own',
    );
}

/** The workload of `argv` and the options, or none (a session without one); a usage error for options without it. */
export function workloadSpec(argv: string[], o: WorkloadOptions & { idle?: boolean }): WorkloadSpec | undefined {
  if (o.idle && argv.length > 0) throw new UsageError('--idle runs no command of its own: drop the command after --');
  if (argv.length === 0 && !o.image && !o.idle) {
    if (o.env || o.input || o.outputPrefix || o.network || o.maxRuntime !== undefined) {
      throw new UsageError(
        '--env, --input, --output-prefix, --network and --max-runtime are for a workload: give its command after -- ' +
          '(or --image, or --idle); a session without one runs until it is ended or its spend cap is reached',
      );
    }
    return undefined;
  }
  const env: Record<string, string> = {};
  for (const pair of o.env ?? []) {
    const at = pair.indexOf('=');
    if (at < 1) throw new UsageError(`--env takes NAME=VALUE, not ${pair}`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return {
    ...(o.image ? { image: o.image } : {}),
    ...(argv.length > 0 ? { command: argv } : {}),
    ...(o.idle ? { idle: true } : {}),
    env,
    max_runtime_seconds: o.maxRuntime ?? DEFAULT_RUNTIME_S,
    network: o.network === true,
    inputs: (o.input ?? []).map((key) => ({ key })),
    ...(o.outputPrefix ? { output: { prefix: o.outputPrefix } } : {}),
  };
}

/** Starts the session: at the rate given, or at the one quoted now. */
async function startSession(ctx: Context, o: RentOptions, workload: WorkloadSpec | undefined) {
  const walletId = payingWallet(ctx, o.wallet);
  // At a bid the price is the bid for each GPU.
  const rate =
    o.maxRate ??
    (o.bid ? new Decimal(o.bid).mul(o.gpus).toFixed() : undefined) ??
    unwrap(
      await ctx.billing.POST('/api/v1/pricing/calculate', {
        body: { provider_id: o.machine, gpu_model: o.gpuModel, gpu_count: o.gpus },
      }),
    ).total_hourly_rate;
  return unwrap(
    await ctx.billing.POST('/api/v1/billing/start-session', {
      params: { header: { 'idempotency-key': idempotencyKey('rent', o.idempotencyKey) } },
      body: {
        wallet_id: walletId,
        provider_id: o.machine,
        gpu_model: o.gpuModel,
        gpu_count: o.gpus,
        accepted_hourly_rate: rate,
        ...(o.spendCap ? { spend_cap: o.spendCap } : {}),
        ...(o.bid ? { bid: o.bid } : {}),
        ...(workload ? { workload } : {}),
      },
    }),
  );
}

function showStarted(json: boolean, started: BillingSchemas['SessionStart']) {
  const s = started.session;
  const rate = s.rates.total_hourly_rate;
  const lasts = `${duration(started.estimated_runtime_minutes * 60_000)} at ${tokens(rate)} an hour (what your balance pays for)`;
  showRecord(json, started, [
    ['session', s.id],
    ['machine', s.provider_id],
    ['gpus', `${s.gpu_count} × ${s.gpu_model}`],
    ['per hour', tokens(rate)],
    ['held now', tokens(started.hold_amount)],
    ['available', tokens(started.available_balance)],
    ['balance lasts', lasts],
    [
      'spend cap',
      s.spend_cap === null ? 'none' : `${tokens(s.spend_cap)} (it ends then: ${time(s.spend_cap_ends_at)})`,
    ],
    ['interruptible', s.bid ? `at a bid of ${tokens(s.bid)} per GPU-hour: may be taken back with notice` : 'no'],
    ['workload', s.workload ? 'yes' : 'no'],
    ['status', s.status],
  ]);
}

/** The seconds from a preemption's notice to its deadline. */
const noticeSeconds = (n: { at: string; deadline: string }) =>
  Math.round((Date.parse(n.deadline) - Date.parse(n.at)) / 1000);

/** How long a session ran: from its start to its end, or to now (`running`). */
function sessionDuration(s: Session, now: number): string {
  const start = new Date(s.started_at).getTime();
  return s.ended_at === null ? `${duration(now - start)} (running)` : duration(new Date(s.ended_at).getTime() - start);
}

/** How a session's workload ended, in a cell: its exit code, or its state and why. */
function workloadEnd(w: Workload | null): string {
  if (!w) return '';
  if (w.state === 'exited') return String(w.exit_code);
  return w.reason ? `${w.state} (${w.reason})` : w.state;
}

/** The workloads of the sessions that have one (a few requests at a time), by session. */
async function workloadsOf(ctx: Context, sessions: Session[]): Promise<Map<string, Workload>> {
  const found = new Map<string, Workload>();
  const withOne = sessions.filter((s) => s.workload === true);
  for (let i = 0; i < withOne.length; i += 8) {
    const batch = await Promise.all(withOne.slice(i, i + 8).map((s) => workloadOf(ctx, s.id)));
    for (const w of batch) found.set(w.session_id, w);
  }
  return found;
}

export function sessionCommands(program: Command) {
  program
    .command('sessions')
    .description(
      'your rental sessions, newest first: when each started and ended, how long it ran, why it ended, its ' +
        "workload's exit code (or how it ended otherwise) and its cost; with --json each session with its workload " +
        '(null for none)',
    )
    .option(
      '--status <statuses>',
      `only sessions in these statuses, separated by commas: ${SESSION_STATUSES.join(', ')} (running: active and ` +
        'grace_period)',
      listOf(SESSION_STATUSES),
    )
    .option('--limit <n>', 'at most this many (the newest)', count('--limit'), 20)
    .action(async (opts: { status?: string[]; limit: number }) => {
      const ctx = context(program);
      const list = await everyPage(
        (cursor) =>
          ctx.billing.GET('/api/v1/billing/sessions', {
            params: {
              query: {
                limit: Math.min(opts.limit, 1000),
                ...(cursor ? { cursor } : {}),
                ...(opts.status ? { status: opts.status as Session['status'][] } : {}),
              },
            },
          }),
        opts.limit,
      );
      const workloads = await workloadsOf(ctx, list);
      const now = Date.now();
      if (ctx.json) {
        printJson(
          list.map((s) => {
            const w = workloads.get(s.id);
            // The workload without its session: the session is the object it is in.
            const { session: _session, ...workload } = w ?? { session: null };
            return { ...s, workload: w ? workload : null };
          }),
        );
        return;
      }
      show(
        false,
        list,
        ['session', 'machine', 'gpus', 'status', 'started', 'ended', 'ran', 'end reason', 'exit', 'cost'],
        list.map((s) => [
          s.id,
          s.provider_id,
          s.gpu_count,
          s.status,
          time(s.started_at),
          time(s.ended_at),
          sessionDuration(s, now),
          s.end_reason ?? '',
          workloadEnd(workloads.get(s.id) ?? null),
          tokens(s.total_cost),
        ]),
      );
    });

  rentalOptions(
    program
      .command('rent')
      .argument('[command...]', 'a workload to run, after --: its program and arguments')
      .description(
        "rent a machine's GPUs: a session billed per started minute (with a workload: from when it runs until it " +
          'ends, which ends the session); prints the session: its price, what is held, and how long your balance ' +
          'lasts at that price',
      ),
  ).action(async (argv: string[], opts: RentOptions) => {
    const ctx = context(program);
    const started = await startSession(ctx, opts, workloadSpec(argv, opts));
    showStarted(ctx.json, started);
    if (!ctx.json && opts.idle) {
      process.stderr.write(`reach it once it runs: gpu shell ${started.session.id}\n`);
    } else if (!ctx.json && started.session.workload) {
      process.stderr.write(`follow it: gpu logs ${started.session.id} -f\n`);
    }
  });

  program
    .command('logs <session-id>')
    .description(
      "a session's workload logs (its standard output, and its standard error on standard error); with -f, followed " +
        'until the workload has ended (or was lost with its machine)',
    )
    .option('-f, --follow', 'print what comes until the workload ends')
    .action(async (sessionId: string, opts: { follow?: boolean }) => {
      const ctx = context(program);
      if (!ctx.json) {
        await printLogs(ctx, sessionId, {
          follow: opts.follow === true,
          stdout: process.stdout,
          stderr: process.stderr,
        });
        return;
      }
      const [stdout, stderr] = [collector(), collector()];
      const w = await printLogs(ctx, sessionId, { follow: opts.follow === true, stdout, stderr });
      printJson({ ...logsSummary(w), stdout: stdout.text(), stderr: stderr.text() });
    });

  rentalOptions(
    program
      .command('run')
      .argument('[command...]', 'the workload, after --: its program and arguments (with --image: instead of its own)')
      .description(
        'rent with a workload, say on standard error what it waits for until it runs (pending: the machine has not ' +
          'taken it yet; preparing: its inputs and image; the seconds waited), follow its logs, print its outputs at ' +
          'its end (--download fetches them) and exit with its exit code (127 when its program is not there, 126 ' +
          'when it cannot be run, 1 when it failed or was stopped, or its session ended before it ran: its machine ' +
          'went offline); with --json its logs go to standard error and the workload at its end to standard output',
      ),
  )
    .option('--download <dir>', 'fetch its outputs into this folder at its end')
    .action(async (argv: string[], opts: RentOptions & { download?: string }) => {
      const ctx = context(program);
      if (argv.length === 0 && !opts.image)
        throw new UsageError('run needs a workload: its command after --, or --image');
      const started = await startSession(ctx, opts, workloadSpec(argv, opts));
      const id = started.session.id;
      process.stderr.write(`session ${id}: ${tokens(started.session.rates.total_hourly_rate)} an hour\n`);
      const interrupted = () => {
        process.stderr.write(`\nstopped following: session ${id} runs on until its workload ends (gpu end ${id})\n`);
        process.exit(130);
      };
      process.once('SIGINT', interrupted);
      let w: Workload;
      try {
        const waited = await untilRunning(ctx, id, ctx.json ? null : process.stderr);
        if (endedBeforeRunning(waited)) {
          const why = waited.session.end_reason ?? 'ended';
          const gone = machineGone(waited);
          const text = gone
            ? `machine ${waited.session.provider_id} went away (${why}) before the workload ran: session ${id} ended`
            : `session ${id} ended (${why}) before the workload ran`;
          if (ctx.json) printJson(waited);
          else process.stderr.write(`${text}; it cost ${tokens(waited.session.total_cost)}\n`);
          throw new ExitStatus(1);
        }
        w = await printLogs(ctx, id, {
          follow: true,
          stdout: ctx.json ? process.stderr : process.stdout,
          stderr: process.stderr,
        });
      } finally {
        process.off('SIGINT', interrupted);
      }
      const saved = opts.download ? await downloadOutputs(ctx, w, opts.download) : [];
      if (ctx.json) printJson(w);
      else {
        // Preempted first: a workload told to stop may save its work and exit cleanly in its grace.
        const end = w.notice
          ? `preempted at ${time(w.notice.at)} with ${noticeSeconds(w.notice)} s notice (an on-demand rental or a ` +
            `higher bid took its GPUs): it ${w.state === 'exited' ? `exited with ${w.exit_code}` : 'was stopped'}`
          : w.state === 'exited'
            ? `exited with ${w.exit_code}`
            : machineGone(w)
              ? `lost with its machine: its session ended (${w.session.end_reason}) and the machine reported no end`
              : `${w.state} (${w.reason ?? 'no reason given'})`;
        const lines = [`workload ${end}; session ${id} cost ${tokens(w.session.total_cost)}`];
        if ((w.outputs ?? []).length === 0) lines.push('no outputs');
        for (const o of w.outputs ?? []) {
          const file = saved.find((s) => s.key === o.key)?.file;
          lines.push(`output ${o.key} (${o.size} bytes)${file ? ` -> ${file}` : ''}`);
        }
        for (const r of w.outputs_refused ?? []) lines.push(`not kept: output/${r.path} (${r.reason})`);
        process.stderr.write(`${lines.join('\n')}\n`);
      }
      // A preempted workload did not finish, however it exited: 1.
      const status = w.notice ? 1 : exitStatusOf(w);
      if (status !== 0) throw new ExitStatus(status);
    });

  program
    .command('end <session-id>')
    .description('end a rental: billed for its started minutes, the rest of the hold released')
    .action(async (sessionId: string) => {
      const ctx = context(program);
      const ended = unwrap(await ctx.billing.POST('/api/v1/billing/end-session', { body: { session_id: sessionId } }));
      const r = ended.billing_record;
      show(
        ctx.json,
        ended,
        ['session', 'minutes', 'cost', "platform's fee (of it)"],
        [[sessionId, r.billed_minutes, tokens(r.total_cost), tokens(r.platform_fee)]],
      );
    });

  program
    .command('bid <session-id>')
    .description(
      "change a running interruptible rental's bid per GPU-hour: it holds its GPUs at the new bid at once (a start " +
        'must bid more to take them); each minute is billed at the highest bid in force during it (a raise prices ' +
        'the minute in progress, a cut the next one)',
    )
    .requiredOption('--price <tokens>', 'the new bid per GPU-hour', amount('--price'))
    .action(async (sessionId: string, opts: { price: string }) => {
      const ctx = context(program);
      const s = unwrap(
        await ctx.billing.POST('/api/v1/billing/sessions/{sessionID}/bid', {
          params: { path: { sessionID: sessionId } },
          body: { bid: opts.price },
        }),
      );
      showRecord(ctx.json, s, [
        ['session', s.id],
        ['bid per GPU-hour', tokens(s.bid ?? '')],
        ['gpus', `${s.gpu_count} × ${s.gpu_model}`],
        ['per hour', tokens(s.rates.total_hourly_rate)],
        ['status', s.status],
      ]);
    });
}

function logsSummary(w: Workload) {
  return { session_id: w.session_id, state: w.state, exit_code: w.exit_code, reason: w.reason };
}
