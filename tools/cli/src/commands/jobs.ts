/**
 * Jobs: `jobs submit` (what to run and on what terms, not where: billing places it on the cheapest machine that meets
 * them and places it again when its machine fails it), `jobs list`, `jobs show`, `jobs logs` (followed across its
 * attempts with -f) and `jobs cancel`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type BillingSchemas, unwrap } from '@gpu/client';
import { parseDuration } from '@gpu/common/duration';
import { type Command, InvalidArgumentError } from 'commander';
import {
  amount,
  type Context,
  context,
  count,
  ExitStatus,
  idempotencyKey,
  listOf,
  megabytes,
  printJson,
  reliabilityScore,
  show,
  showRecord,
  UsageError,
} from '../cli.ts';
import { time, tokens } from '../format.ts';
import { payingWallet } from '../wallet-choice.ts';
import { collector, printLogs } from '../workload.ts';
import { type WorkloadOptions, workloadOptions, workloadSpec } from './sessions.ts';

type Job = BillingSchemas['Job'];

interface SubmitOptions extends WorkloadOptions {
  name?: string;
  wallet?: string;
  gpus: number;
  gpuModel?: string;
  minVram?: number;
  maxPrice: string;
  bid?: string;
  onDemandFallback?: boolean;
  minReliability?: string;
  region?: string;
  spendCap: string;
  maxAttempts?: number;
  retryOnFailure?: boolean;
  checkpointEvery?: number;
  queueTimeout?: number;
  waitForCapacity?: boolean;
  idempotencyKey?: string;
}

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);
/** What `jobs list --state` takes. */
const JOB_STATES = ['queued', 'placing', 'running', 'recovering', 'succeeded', 'failed', 'cancelled', 'open'];

/** A duration in whole seconds for the queue: `600`, `90s`, `15m`, `2h`, up to 30 days. */
function queueSeconds(value: string): number {
  const ms = /^\d+$/.test(value) ? Number(value) * 1000 : parseDuration(value);
  const s = ms === undefined ? Number.NaN : Math.ceil(ms / 1000);
  if (!(s >= 1 && s <= 30 * 86_400)) throw new InvalidArgumentError('a duration from 1s to 30 days: 600, 15m, 2h');
  return s;
}

function showJob(json: boolean, j: Job) {
  const last = j.attempts.at(-1);
  showRecord(json, j, [
    ['job', j.id],
    ['name', j.name ?? ''],
    ['state', j.state],
    ['reason', j.reason ?? ''],
    ['queue position', j.queue_position ?? ''],
    ['gpus', `${j.terms.gpu_count} × ${j.terms.gpu_model ?? 'any'}`],
    ['max price/GPU-h', tokens(j.terms.max_price_per_gpu_hour)],
    [
      'bid/GPU-h',
      j.terms.bid_per_gpu_hour
        ? `${tokens(j.terms.bid_per_gpu_hour)} (interruptible${j.terms.on_demand_fallback ? ', else on demand' : ''})`
        : 'none (on demand)',
    ],
    ['attempts', `${j.attempts.length} of ${j.max_attempts}`],
    ['machine', last?.provider_id ?? ''],
    ['session', j.session_id ?? ''],
    ['spent', `${tokens(j.spent)} of ${tokens(j.spend_cap)}`],
    ['checkpoint', j.checkpoint ? `${j.checkpoint.key} (${j.checkpoint.size} bytes, ${j.checkpoint.kept_at})` : ''],
  ]);
}

async function readJob(ctx: Context, id: string): Promise<Job> {
  return unwrap(await ctx.billing.GET('/api/v1/billing/jobs/{jobID}', { params: { path: { jobID: id } } }));
}

/** Where a job's logs go: the terminal's streams, or (with --json) collectors. */
interface LogStreams {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

/**
 * The job's logs: its latest attempt's, or with `follow` each attempt's in turn as they run, until the job ends. The
 * job at the end. The line that says another attempt began goes to standard error, never into the logs kept.
 */
async function followJob(ctx: Context, id: string, follow: boolean, out: LogStreams): Promise<Job> {
  let job = await readJob(ctx, id);
  let shown: string | null = null;
  for (;;) {
    const session = job.session_id;
    if (session && session !== shown) {
      if (shown !== null || job.attempts.length > 1) {
        const a = job.attempts.at(-1);
        process.stderr.write(`-- attempt ${a?.n} on machine ${a?.provider_id} (session ${session})\n`);
      }
      shown = session;
      await printLogs(ctx, session, { follow, ...out });
    }
    if (!follow) {
      if (!session && !ctx.json) {
        process.stderr.write(`job ${id} has not run yet (${job.state}: ${job.reason ?? 'waiting'})\n`);
      }
      return job;
    }
    job = await readJob(ctx, id);
    if (ENDED.has(job.state) && job.session_id === shown) return job;
    if (job.session_id === shown) await sleep(1000);
  }
}

export function jobCommands(program: Command) {
  const jobs = program
    .command('jobs')
    .description(
      'jobs: what to run and on what terms; the platform places them and recovers them when a machine fails',
    );

  workloadOptions(
    jobs
      .command('submit')
      .argument('[command...]', 'its program and arguments, after -- (with --image: instead of its own)')
      .description(
        'submit a job: queued, then placed on the cheapest machine that meets its terms, and placed again on another ' +
          'when its machine fails it; prints the job',
      )
      .option('--wallet <wallet-id>', 'the wallet that pays its sessions (default: the default wallet, gpu wallet use)')
      .option('--gpus <n>', 'how many GPUs of one machine', count('--gpus'), 1)
      .option('--gpu-model <model>', 'a GPU model (H100, A100, ...); any when absent')
      .option(
        '--min-vram <size>',
        'every GPU has at least this VRAM: MB (40960) or GB (80GB; drivers count 1024 MB a GB)',
        megabytes('--min-vram'),
      )
      .requiredOption('--max-price <tokens>', 'the most it pays per GPU-hour', amount('--max-price'))
      .option(
        '--bid <tokens>',
        'interruptible at this bid per GPU-hour, on machines that take bids: cheaper, but taken back with notice ' +
          'for on-demand rentals and higher bids, and placed again from its last checkpoint',
        amount('--bid'),
      )
      .option('--on-demand-fallback', 'with --bid: placed on demand (at up to --max-price) when no bid can win GPUs')
      .option('--min-reliability <score>', "the machine's reliability score, at least (0-1)", reliabilityScore)
      .option('--region <region>', "the machine's location")
      .requiredOption('--spend-cap <tokens>', 'the most all its attempts together may cost', amount('--spend-cap'))
      .option(
        '--max-attempts <n>',
        'sessions it may run as in all, recoveries included (default 3)',
        count('--max-attempts'),
      )
      .option('--retry-on-failure', 'place it again when its workload fails or exits non-zero')
      .option(
        '--checkpoint-every <seconds>',
        'keep /work/checkpoint/ this often (and when it ends); its next attempt starts with what was kept last',
        count('--checkpoint-every'),
      )
      .option(
        '--queue-timeout <duration>',
        'fail it when no machine took it within this long (600, 15m, 2h)',
        queueSeconds,
      )
      .option('--wait-for-capacity', 'queue it even when no registered machine could ever meet its terms')
      .option('--name <name>', 'a name of yours, shown with it')
      .option('--idempotency-key <key>', 'the same command with the same key again submits no second job'),
  ).action(async (argv: string[], o: SubmitOptions) => {
    const ctx = context(program);
    if (argv.length === 0 && !o.image) throw new UsageError('a job runs a workload: its command after --, or --image');
    if (o.onDemandFallback && !o.bid) {
      throw new UsageError('--on-demand-fallback is for a job at a --bid: without one it runs on demand anyway');
    }
    const given = workloadSpec(argv, o)!;
    const workload =
      o.checkpointEvery === undefined ? given : { ...given, checkpoint: { interval_seconds: o.checkpointEvery } };
    const job = unwrap(
      await ctx.billing.POST('/api/v1/billing/jobs', {
        params: { header: { 'idempotency-key': idempotencyKey('job', o.idempotencyKey) } },
        body: {
          wallet_id: payingWallet(ctx, o.wallet),
          gpu_count: o.gpus,
          ...(o.gpuModel ? { gpu_model: o.gpuModel } : {}),
          ...(o.minVram !== undefined ? { min_vram_mb: o.minVram } : {}),
          max_price_per_gpu_hour: o.maxPrice,
          ...(o.bid ? { bid_per_gpu_hour: o.bid } : {}),
          ...(o.onDemandFallback ? { on_demand_fallback: true } : {}),
          ...(o.minReliability !== undefined ? { min_reliability: Number(o.minReliability) } : {}),
          ...(o.region ? { region: o.region } : {}),
          spend_cap: o.spendCap,
          ...(o.maxAttempts !== undefined ? { max_attempts: o.maxAttempts } : {}),
          retry_on_failure: o.retryOnFailure === true,
          ...(o.queueTimeout !== undefined ? { queue_timeout_seconds: o.queueTimeout } : {}),
          ...(o.waitForCapacity ? { wait_for_capacity: true } : {}),
          ...(o.name ? { name: o.name } : {}),
          workload,
        },
      }),
    );
    showJob(ctx.json, job);
    if (!ctx.json) process.stderr.write(`follow it: gpu jobs logs ${job.id} -f\n`);
  });

  jobs
    .command('list')
    .description('your jobs, newest first')
    .option(
      '--state <states>',
      `only jobs in these states, separated by commas: ${JOB_STATES.join(', ')} (open: not ended)`,
      listOf(JOB_STATES),
    )
    .action(async (opts: { state?: string[] }) => {
      const ctx = context(program);
      const list = unwrap(
        await ctx.billing.GET('/api/v1/billing/jobs', {
          params: { query: (opts.state ? { state: opts.state } : {}) as never },
        }),
      );
      show(
        ctx.json,
        list,
        ['id', 'name', 'state', 'attempts', 'spent', 'created'],
        list.map((j) => [j.id, j.name ?? '', j.state, j.attempts.length, tokens(j.spent), time(j.created_at)]),
      );
    });

  jobs
    .command('show <job-id>')
    .description('a job: its state and why, its place in the queue, its attempts and what they cost')
    .action(async (id: string) => {
      const ctx = context(program);
      const job = await readJob(ctx, id);
      if (ctx.json) return printJson(job);
      showJob(false, job);
      if (job.attempts.length > 0) {
        process.stdout.write('\n');
        show(
          false,
          job.attempts,
          ['attempt', 'machine', 'session', 'started', 'ended', 'cost', 'end'],
          job.attempts.map((a) => [
            a.n,
            a.provider_id,
            a.session_id,
            time(a.started_at),
            time(a.ended_at),
            tokens(a.cost),
            a.end_reason ?? '',
          ]),
        );
      }
    });

  jobs
    .command('logs <job-id>')
    .description(
      "a job's logs (its latest attempt's); with -f, followed across its attempts until it ends, then its exit " +
        'status: 0 when it succeeded, 1 otherwise',
    )
    .option('-f, --follow', 'print what comes, attempt after attempt, until the job ends')
    .action(async (id: string, opts: { follow?: boolean }) => {
      const ctx = context(program);
      const kept = ctx.json ? { stdout: collector(), stderr: collector() } : undefined;
      const job = await followJob(ctx, id, opts.follow === true, kept ?? process);
      if (kept) {
        const { id: jobId, state, reason, spent } = job;
        printJson({ id: jobId, state, reason, spent, stdout: kept.stdout.text(), stderr: kept.stderr.text() });
      } else if (opts.follow) {
        process.stderr.write(`job ${job.state}${job.reason ? ` (${job.reason})` : ''}; spent ${tokens(job.spent)}\n`);
      }
      if (opts.follow && job.state !== 'succeeded') throw new ExitStatus(1);
    });

  jobs
    .command('cancel <job-id>')
    .description('cancel a job: placed no more, and a session it runs ends now (billed for what ran)')
    .action(async (id: string) => {
      const ctx = context(program);
      const job = unwrap(
        await ctx.billing.POST('/api/v1/billing/jobs/{jobID}/cancel', { params: { path: { jobID: id } } }),
      );
      showJob(ctx.json, job);
    });
}
