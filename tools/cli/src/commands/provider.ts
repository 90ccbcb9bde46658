/**
 * For providers, `gpu provider ...`: `machines [list]` (yours, at the registry), `machines add` and
 * `daemon-credentials` (a machine onboarded: provider-onboarding.ts), `rates show|set` (a machine's own rates at
 * billing), `earnings` (what your machines earned and what can be paid out), `payout` (ask for one, on chain) and
 * `payout-settings` (pay out automatically at each session's end, or not).
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import { type Command, Option } from 'commander';
import {
  amount,
  type Context,
  collect,
  context,
  DECIMAL,
  idempotencyKey,
  show,
  showRecord,
  UsageError,
} from '../cli.ts';
import { everyPage } from '../paging.ts';
import { unwrapHinting } from '../problems.ts';
import { machineOnboarding } from './provider-onboarding.ts';
import { showTransaction } from './wallet.ts';

type Earnings = BillingSchemas['ProviderEarnings'];

/** Every machine of the caller's (the registry lists a provider's own machines only). */
function myMachines(ctx: Context) {
  return everyPage((cursor) =>
    ctx.registry.GET('/providers', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
  );
}

/** `MODEL=RATE` pairs as billing's `base_rates`. */
function baseRates(pairs: string[]): Record<string, string> {
  const rates: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.lastIndexOf('=');
    const model = pair.slice(0, at).trim();
    const rate = pair.slice(at + 1);
    if (!model || !DECIMAL.test(rate)) throw new UsageError(`--base takes MODEL=RATE (H100=2.5), not ${pair}`);
    rates[model] = rate;
  }
  return rates;
}

export function providerCommands(program: Command) {
  const provider = program
    .command('provider')
    .description("for providers: your machines, their daemons' credentials, rates, earnings and payouts");
  const machines = provider.command('machines').description('your machines at the registry');
  machines
    .command('list', { isDefault: true })
    .description('your machines: their status and GPUs')
    .action(() => listMachines(program));
  machineOnboarding(program, provider, machines);
  moneyCommands(program, provider);
  // The same commands at the top level, as they were before `provider` held them (scripts use them).
  program.command('machines', { hidden: true }).action(() => listMachines(program));
  moneyCommands(program, program, { hidden: true });
  payoutSettingsCommand(program, provider);
}

async function listMachines(program: Command) {
  const ctx = context(program);
  const list = await myMachines(ctx);
  show(
    ctx.json,
    list,
    ['id', 'name', 'status', 'gpus', 'held', 'location', 'last seen'],
    list.map((m) => [
      m.id,
      m.name,
      m.status,
      gpuSummary(m.gpus.map((g) => g.model_name)),
      m.held ? 'yes' : '',
      m.location,
      m.last_seen_at,
    ]),
  );
}

/** `rates`, `earnings` and `payout`, under `parent`. */
function moneyCommands(program: Command, parent: Command, opts: { hidden?: boolean } = {}) {
  const rates = parent.command('rates', opts).description("a machine's own rates (else the platform's apply)");
  rates
    .command('show <machine-id>')
    .description("the machine's own rates: per GPU-hour by model, VRAM and power (empty: the platform's)")
    .action(async (machineId: string) => {
      const ctx = context(program);
      const r = unwrap(
        await ctx.billing.GET('/api/v1/provider/{providerID}/rates', { params: { path: { providerID: machineId } } }),
      );
      showRates(ctx.json, r);
    });
  rates
    .command('set <machine-id>')
    .description(
      "replace the machine's rates (they price its sessions started from now on); what is left out is the platform's",
    )
    .option('--base <MODEL=RATE>', 'tokens per GPU-hour of a model, repeatable; default=RATE prices the rest', collect)
    .option('--vram-rate <tokens>', 'per GB of VRAM and hour', amount('--vram-rate'))
    .option('--power-rate <tokens>', 'per watt and hour', amount('--power-rate'))
    .option(
      '--bid-floor <tokens>',
      'take bids (interruptible rentals, taken back for on-demand ones) of at least this per GPU-hour; default: none',
      amount('--bid-floor'),
    )
    .action(
      async (
        machineId: string,
        opts: { base?: string[]; vramRate?: string; powerRate?: string; bidFloor?: string },
      ) => {
        const ctx = context(program);
        const body = {
          base_rates: baseRates(opts.base ?? []),
          vram_rate_per_gb_hour: opts.vramRate ?? null,
          power_rate_per_watt_hour: opts.powerRate ?? null,
          bid_floor: opts.bidFloor ?? null,
        };
        const r = unwrap(
          await ctx.billing.PUT('/api/v1/provider/{providerID}/rates', {
            params: { path: { providerID: machineId } },
            body,
          }),
        );
        showRates(ctx.json, r);
      },
    );

  parent
    .command('earnings [machine-id]', opts)
    .description('what a machine earned, was paid, and can be paid out now (without an ID: each of your machines)')
    .action(async (machineId: string | undefined) => {
      const ctx = context(program);
      const ids = machineId ? [machineId] : (await myMachines(ctx)).map((m) => m.id);
      const list: Earnings[] = [];
      for (const id of ids) {
        const got = await ctx.billing.GET('/api/v1/provider/{providerID}/earnings', {
          params: { path: { providerID: id } },
        });
        // Listing them all, a machine without a wallet yet has earned nothing: left out.
        if (
          !machineId &&
          got.response.status === 404 &&
          (got.error as { code?: string })?.code === 'WALLET_NOT_FOUND'
        ) {
          continue;
        }
        list.push(unwrap(got));
      }
      show(
        ctx.json,
        machineId ? list[0] : list,
        ['machine', 'earned', 'paid out', 'pending', 'available', 'locked', 'minimum payout'],
        list.map((e) => [
          e.provider_id,
          e.total_earned,
          e.total_paid_out,
          e.pending_payouts,
          e.available_for_payout,
          e.locked,
          e.minimum_payout,
        ]),
      );
    });

  parent
    .command('payout <machine-id>', opts)
    .description("pay a machine's earnings out on chain: all that is available, or --amount (at least the minimum)")
    .option('--amount <tokens>', 'how much, a decimal amount such as 12.5', amount('--amount'))
    .option('--to <address>', "the owner address to pay (default: the machine's wallet address)")
    .option(
      '--idempotency-key <key>',
      'a key of yours for this payout: the same command with the same key again never pays twice',
    )
    .action(async (machineId: string, opts: { amount?: string; to?: string; idempotencyKey?: string }) => {
      const ctx = context(program);
      const key = idempotencyKey('payout', opts.idempotencyKey);
      const paid = unwrapHinting(
        await ctx.billing.POST('/api/v1/provider/{providerID}/payout', {
          params: { path: { providerID: machineId }, header: { 'idempotency-key': key } },
          body: { ...(opts.amount ? { amount: opts.amount } : {}), ...(opts.to ? { destination: opts.to } : {}) },
        }),
        // Earnings, not a deposit, are what a payout lacks.
        {
          INSUFFICIENT_FUNDS: `gpu provider earnings ${machineId} shows what is available to pay out, and the minimum`,
        },
      );
      showTransaction(ctx.json, paid);
    });
}

/** `payout-settings`, under `provider` only (it came after the top-level aliases). */
function payoutSettingsCommand(program: Command, provider: Command) {
  provider
    .command('payout-settings <machine-id>')
    .description(
      "show a machine's automatic payout (its earnings paid out at each session's end); --auto on|off changes it",
    )
    .addOption(
      new Option('--auto <on|off>', 'pay the earnings out automatically (on) or only when asked (off)').choices([
        'on',
        'off',
      ]),
    )
    .option('--to <address>', "with --auto on: the owner address to pay (default: the machine's wallet address)")
    .action(async (machineId: string, opts: { auto?: 'on' | 'off'; to?: string }) => {
      if (opts.to !== undefined && opts.auto !== 'on') {
        throw new UsageError('--to names where automatic payouts go: give it with --auto on');
      }
      const ctx = context(program);
      const path = { params: { path: { providerID: machineId } } };
      const settings = unwrap(
        opts.auto === undefined
          ? await ctx.billing.GET('/api/v1/provider/{providerID}/payout-settings', path)
          : await ctx.billing.PUT('/api/v1/provider/{providerID}/payout-settings', {
              ...path,
              body: { auto_payout: opts.auto === 'on', ...(opts.to ? { destination: opts.to } : {}) },
            }),
      );
      showRecord(ctx.json, settings, [
        ['machine', settings.provider_id],
        ['wallet', settings.wallet_id],
        ['automatic payout', settings.auto_payout ? `on, to ${settings.destination}` : 'off'],
        ['minimum payout', settings.minimum_payout],
        ...(settings.last_failure ? [['last failure', settings.last_failure] as [string, string]] : []),
        ...(settings.next_attempt_at ? [['tried again at', settings.next_attempt_at] as [string, string]] : []),
      ]);
    });
}

/** "8 × H100" for a machine's GPUs ("4 × A100, 2 × L4" when mixed). */
function gpuSummary(models: string[]): string {
  const counts = new Map<string, number>();
  for (const m of models) counts.set(m, (counts.get(m) ?? 0) + 1);
  return [...counts].map(([m, n]) => `${n} × ${m}`).join(', ');
}

function showRates(json: boolean, r: BillingSchemas['ProviderRates']) {
  const own = Object.entries(r.base_rates);
  showRecord(json, r, [
    ['machine', r.provider_id],
    ...own.map(([model, rate]): [string, string] => [`per GPU-hour: ${model}`, rate]),
    ...(own.length === 0 ? [['per GPU-hour', "the platform's"] as [string, string]] : []),
    ['per GB VRAM-hour', r.vram_rate_per_gb_hour ?? "the platform's"],
    ['per watt-hour', r.power_rate_per_watt_hour ?? "the platform's"],
    ['bid floor', r.bid_floor === null ? 'none (takes no bids)' : `${r.bid_floor} per GPU-hour`],
    ['updated', r.updated_at ?? 'never (the platform rates apply)'],
  ]);
}
