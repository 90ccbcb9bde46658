/**
 * For providers, `gpu provider ...`: `machines [list]` (yours, at the registry), `machines add` and
 * `daemon-credentials` (a machine onboarded: provider-onboarding.ts), `rates show|set` (a machine's own rates at
 * billing), `earnings` (what your machines earned and what can be paid out), `payout` (ask for one, on chain) and
 * `payout-settings` (pay out automatically at each session's end, or not).
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import { gpuModelKey } from '@gpu/common/gpu-models';
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
type Rates = BillingSchemas['ProviderRates'];

/** Reads and writes of `rates set` while others change the same machine's rates in between. */
const RATES_ATTEMPTS = 5;

/** A machine with no rates of its own (what `--replace` starts from). */
const NO_RATES: Pick<Rates, 'base_rates' | 'vram_rate_per_gb_hour' | 'power_rate_per_watt_hour' | 'bid_floor'> = {
  base_rates: {},
  vram_rate_per_gb_hour: null,
  power_rate_per_watt_hour: null,
  bid_floor: null,
};

/** Every machine of the caller's (the registry lists a provider's own machines only). */
function myMachines(ctx: Context) {
  return everyPage((cursor) =>
    ctx.registry.GET('/providers', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
  );
}

/** What `rates set` was given: `none` for a rate that goes back to the platform's. */
interface RateChanges {
  base?: string[];
  vramRate?: string;
  powerRate?: string;
  bidFloor?: string;
  replace?: boolean;
}

/** A rate option: a decimal amount, or `none` (the platform's rate; for the bid floor, no bids). */
function rateOrNone(name: string) {
  const parse = amount(name);
  return (value: string) => (value === 'none' ? value : parse(value));
}

/** The rate key of a model as billing keeps it (`H100` → `nvidia-tesla-h100`; `default` is itself). */
function rateKey(model: string): string {
  return model === 'default' ? model : gpuModelKey(model);
}

/** `--base` pairs as (rate key, rate or `none`), or a usage error naming the pair billing would not read. */
function basePairs(pairs: string[]): [string, string][] {
  return pairs.map((pair) => {
    const at = pair.lastIndexOf('=');
    const model = at > 0 ? pair.slice(0, at).trim() : '';
    const rate = pair.slice(at + 1);
    if (!model || !(DECIMAL.test(rate) || rate === 'none')) {
      throw new UsageError(`--base takes MODEL=RATE (H100=2.5, or H100=none for the platform's), not ${pair}`);
    }
    return [rateKey(model), rate];
  });
}

/**
 * The rates `rates set` asks for: `current` (its models by their keys) with what was given changed (`MODEL=none` and
 * `none` put back the platform's), or with `--replace` only what was given.
 */
function ratesAfter(current: typeof NO_RATES, base: [string, string][], opts: RateChanges) {
  const rates: Record<string, string> = {};
  if (!opts.replace) for (const [model, rate] of Object.entries(current.base_rates)) rates[rateKey(model)] = rate;
  for (const [key, rate] of base) {
    if (rate === 'none') delete rates[key];
    else rates[key] = rate;
  }
  const kept = (given: string | undefined, now: string | null) =>
    given === undefined ? (opts.replace ? null : now) : given === 'none' ? null : given;
  return {
    base_rates: rates,
    vram_rate_per_gb_hour: kept(opts.vramRate, current.vram_rate_per_gb_hour),
    power_rate_per_watt_hour: kept(opts.powerRate, current.power_rate_per_watt_hour),
    bid_floor: kept(opts.bidFloor, current.bid_floor),
  };
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
  moneyCommands(program, provider, provider.command('rates').description(MACHINE_RATES));
  // The same commands at the top level, as they were before `provider` held them (scripts use them); `gpu rates` itself
  // is the platform's rate card (market.ts), `rates show` and `rates set` these.
  program.command('machines', { hidden: true }).action(() => listMachines(program));
  const platformRates = program.commands.find((c) => c.name() === 'rates');
  if (!platformRates) throw new Error('gpu rates (the platform rate card) is registered before the provider commands');
  moneyCommands(program, program, platformRates, { hidden: true });
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

const MACHINE_RATES = "a machine's own rates (else the platform's apply)";

/** `rates show|set` (under `rates`), `earnings` and `payout` (under `parent`). */
function moneyCommands(program: Command, parent: Command, rates: Command, opts: { hidden?: boolean } = {}) {
  rates
    .command('show <machine-id>', opts)
    .description("the machine's own rates: per GPU-hour by model, VRAM and power (empty: the platform's)")
    .action(async (machineId: string) => {
      const ctx = context(program);
      const r = unwrap(
        await ctx.billing.GET('/api/v1/provider/{providerID}/rates', { params: { path: { providerID: machineId } } }),
      );
      showRates(ctx.json, r);
    });
  rates
    .command('set <machine-id>', opts)
    .description(
      "change the machine's rates (they price its sessions started from now on): what is given changes, the rest " +
        "is kept; none puts the platform's back. With --replace, what is left out is the platform's",
    )
    .option(
      '--base <MODEL=RATE>',
      "tokens per GPU-hour of a model, repeatable; default=RATE prices the rest; MODEL=none: the platform's",
      collect,
    )
    .option('--vram-rate <tokens|none>', 'per GB of VRAM and hour', rateOrNone('--vram-rate'))
    .option('--power-rate <tokens|none>', 'per watt and hour', rateOrNone('--power-rate'))
    .option(
      '--bid-floor <tokens|none>',
      'take bids (interruptible rentals, taken back for on-demand ones) of at least this per GPU-hour; none: no bids',
      rateOrNone('--bid-floor'),
    )
    .option(
      '--replace',
      "set exactly what is given: every rate left out is the platform's, and no bids without a floor",
    )
    .action(async (machineId: string, opts: RateChanges) => {
      const given = opts.base?.length || [opts.vramRate, opts.powerRate, opts.bidFloor].some((o) => o !== undefined);
      if (!given && !opts.replace) {
        throw new UsageError('name a rate to change (--base, --vram-rate, --power-rate, --bid-floor), or --replace');
      }
      const base = basePairs(opts.base ?? []);
      const ctx = context(program);
      const path = { params: { path: { providerID: machineId } } };
      if (opts.replace) {
        const body = ratesAfter(NO_RATES, base, opts);
        showRates(ctx.json, unwrap(await ctx.billing.PUT('/api/v1/provider/{providerID}/rates', { ...path, body })));
        return;
      }
      // Read, changed and written back only if no one changed them in between (If-Match: the ETag read); else read
      // again and the same changes made to what is there now.
      for (let attempt = 1; ; attempt++) {
        const read = await ctx.billing.GET('/api/v1/provider/{providerID}/rates', path);
        const current = unwrap(read);
        // Billing's tag is strong; a proxy that re-encodes the answer may mark it weak (W/"..."), which If-Match
        // never matches: the rates are the same, so the tag goes back as billing made it.
        const etag = read.response.headers.get('etag')?.replace(/^W\//, '');
        const written = await ctx.billing.PUT('/api/v1/provider/{providerID}/rates', {
          params: { path: path.params.path, header: etag ? { 'if-match': etag } : {} },
          body: ratesAfter(current, base, opts),
        });
        if (written.response.status === 412 && attempt < RATES_ATTEMPTS) continue;
        showRates(ctx.json, unwrap(written));
        return;
      }
    });

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
