/**
 * The market: `offers` (machines with free GPUs, searched and sorted), `quote` (a machine's price for a rental) and
 * `rates` (the platform's rate card: what prices a machine without rates of its own).
 */
import { type RegistryPaths, type RegistrySchemas, unwrap } from '@gpu/client';
import { type Command, Option } from 'commander';
import {
  amount,
  context,
  count,
  dottedVersion,
  megabytes,
  printJson,
  reliabilityScore,
  show,
  showRecord,
} from '../cli.ts';
import { gigabytes, score, tokens } from '../format.ts';

type Offer = RegistrySchemas['Offer'];

/** The orders the registry's `GET /offers` takes (its OpenAPI document, through the generated client). */
type OfferSort = NonNullable<NonNullable<RegistryPaths['/offers']['get']['parameters']['query']>['sort']>;

/**
 * The orders the market sorts by: the registry's own names, every one of them (checked when the CLI is type-checked
 * against the registry's document: a sort it does not take, or one of its own left out here, fails the build).
 */
const SORTS = [
  'price',
  '-price',
  'vram_price',
  '-vram_price',
  'reliability',
  '-reliability',
  'bid_floor',
  '-bid_floor',
] as const satisfies readonly OfferSort[];
const everySort: [Exclude<OfferSort, (typeof SORTS)[number]>] extends [never] ? true : never = true;
void everySort;

interface OfferOptions {
  gpuModel?: string;
  minFreeGpus?: number;
  maxPrice?: string;
  maxBid?: string;
  minVram?: number;
  minDisk?: number;
  minDriver?: string;
  minComputeCapability?: string;
  architecture?: string;
  minReliability?: string;
  region?: string;
  sort?: (typeof SORTS)[number];
  limit: number;
}

/** The filters given, as the command line said them (for the line that says nothing matched them). */
function filtersGiven(o: OfferOptions): string {
  const given: [string, string | number | undefined][] = [
    ['--gpu-model', o.gpuModel],
    ['--min-free-gpus', o.minFreeGpus],
    ['--max-price', o.maxPrice],
    ['--max-bid', o.maxBid],
    ['--min-vram', o.minVram === undefined ? undefined : gigabytes(o.minVram)],
    ['--min-disk', o.minDisk === undefined ? undefined : gigabytes(o.minDisk)],
    ['--min-driver', o.minDriver],
    ['--min-compute-capability', o.minComputeCapability],
    ['--architecture', o.architecture],
    ['--min-reliability', o.minReliability],
    ['--region', o.region],
  ];
  return given
    .filter(([, v]) => v !== undefined)
    .map(([flag, v]) => `${flag} ${v}`)
    .join(' ');
}

/**
 * What an offer's price is made of, in a cell: `base + VRAM GB × its rate + power W × its rate`, the base rate in
 * tokens (six decimals), the rates per GB and per W as the platform states them; a rate of the machine's own marked
 * `*` (the others are the platform's), the market's factors when they are not 1.
 */
function priceMadeOf(o: Offer): string {
  const p = o.price_parts;
  if (!p) return '';
  const own = (source: string) => (source === 'provider' ? '*' : '');
  const parts = [
    `${tokens(p.base)}${own(p.base_source)}`,
    `${p.vram_gb} GB × ${p.vram_rate_per_gb_hour}${own(p.vram_rate_source)}`,
    `${p.power_w} W × ${p.power_rate_per_watt_hour}${own(p.power_rate_source)}`,
  ];
  const factors = [p.demand_multiplier, p.supply_factor].filter((f) => f !== '1');
  const sum = parts.join(' + ');
  return factors.length > 0 ? `(${sum}) × ${factors.join(' × ')}` : sum;
}

export function marketCommands(program: Command) {
  program
    .command('offers')
    .description(
      'search the market: groups of free GPUs of idle machines, cheapest per GPU-hour first by default; each offer ' +
        "says what its price is made of (the model's base rate + its VRAM at the VRAM rate + its power at the power " +
        "rate; * marks the machine's own rate, the others are the platform's). Nothing that matches: a line on " +
        'standard error, exit status 0 (with --json: [])',
    )
    .option('--gpu-model <model>', 'e.g. H100, A100, "RTX 4090"')
    .option('--min-free-gpus <n>', 'at least this many free GPUs', count('--min-free-gpus'))
    .option('--max-price <tokens>', 'at most this price per GPU-hour', amount('--max-price'))
    .option(
      '--max-bid <tokens>',
      'machines that take bids (gpu rent --bid), with a bid floor per GPU-hour at most this: a bid of it wins a free GPU',
      amount('--max-bid'),
    )
    .option(
      '--min-vram <size>',
      'every GPU has at least this VRAM: MB (40960) or GB (80GB; drivers count 1024 MB a GB: an 80 GB card has 79.6)',
      megabytes('--min-vram'),
    )
    .option(
      '--min-disk <size>',
      'each workload gets at least this disk: MB, GB (200GB) or TB (machines that do not say theirs are left out)',
      megabytes('--min-disk'),
    )
    .option(
      '--min-driver <version>',
      'at least this GPU driver version (550.54.15; the driver bounds the CUDA versions a workload can use)',
      dottedVersion('--min-driver'),
    )
    .option(
      '--min-compute-capability <x.y>',
      'at least this CUDA compute capability (8.0: A100; 8.9: RTX 4090, L40; 9.0: H100)',
      dottedVersion('--min-compute-capability'),
    )
    .option('--architecture <name>', 'this GPU architecture (Ampere, Hopper, Ada; any case)')
    .option('--min-reliability <score>', 'at least this reliability score (0-1)', reliabilityScore)
    .option('--region <region>', "the machine's region (its location; any case)")
    .addOption(
      new Option(
        '--sort <order>',
        'price (per GPU-hour, cheapest first), vram_price (per GB of VRAM-hour, cheapest first), reliability ' +
          '(least reliable first), bid_floor (machines that take bids, lowest floor first); a leading - turns it ' +
          'round: -reliability is the most reliable first',
      ).choices(SORTS),
    )
    .option('--limit <n>', 'at most this many (1-1000)', count('--limit', 1000), 20)
    .action(async (opts: OfferOptions) => {
      const ctx = context(program);
      const query = {
        ...(opts.gpuModel ? { gpu_model: opts.gpuModel } : {}),
        ...(opts.minFreeGpus ? { min_free_gpus: opts.minFreeGpus } : {}),
        ...(opts.maxPrice ? { max_price: opts.maxPrice } : {}),
        ...(opts.maxBid ? { max_bid: opts.maxBid } : {}),
        ...(opts.minVram !== undefined ? { min_vram: opts.minVram } : {}),
        ...(opts.minDisk !== undefined ? { min_disk: opts.minDisk } : {}),
        ...(opts.minDriver ? { min_driver_version: opts.minDriver } : {}),
        ...(opts.minComputeCapability ? { min_compute_capability: opts.minComputeCapability } : {}),
        ...(opts.architecture ? { architecture: opts.architecture } : {}),
        ...(opts.minReliability !== undefined ? { min_reliability: Number(opts.minReliability) } : {}),
        ...(opts.region ? { region: opts.region } : {}),
        ...(opts.sort ? { sort: opts.sort } : {}),
        limit: opts.limit,
      };
      const offers = unwrap(await ctx.registry.GET('/offers', { params: { query } }));
      if (ctx.json) return printJson(offers);
      if (offers.length === 0) {
        const filters = filtersGiven(opts);
        process.stderr.write(
          filters
            ? `no offer matches ${filters} (fewer filters find more)\n`
            : opts.sort === 'bid_floor' || opts.sort === '-bid_floor'
              ? 'no offers at a bid: no machine that takes bids has free GPUs on the market now\n'
              : 'no offers: no machine has free GPUs on the market now\n',
        );
        return;
      }
      show(
        false,
        offers,
        [
          'machine',
          'gpu',
          'free',
          'vram',
          'driver',
          'cc',
          'disk',
          'region',
          'reliability',
          'price/GPU-h',
          'price/GB-h',
          'bid floor',
          '= base + VRAM + power',
        ],
        offers.map((o) => [
          o.provider_id,
          o.gpu_model,
          `${o.free_gpus}/${o.gpu_count}`,
          gigabytes(o.vram_mb),
          o.driver_version,
          o.compute_capability,
          o.disk_mb === null ? '' : gigabytes(o.disk_mb),
          o.region,
          score(o.reliability.score),
          tokens(o.price_per_gpu_hour),
          tokens(o.price_per_vram_gb_hour),
          o.interruptible ? tokens(o.interruptible.bid_floor) : '',
          priceMadeOf(o),
        ]),
      );
    });

  program
    .command('quote')
    .description(
      "price a rental of a machine's GPUs: its hourly rate, what it is made of, and what a duration costs (of which " +
        "the platform's fee: its share, not added)",
    )
    .requiredOption('--machine <id>', 'the machine (its provider ID, from gpu offers)')
    .option('--gpus <n>', 'how many of its GPUs', count('--gpus'), 1)
    .requiredOption('--gpu-model <model>', 'the model of its GPUs (H100, A100, ...)')
    .option('--hours <n>', 'for how long, a decimal number of hours (1.5)', amount('--hours'), '1')
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
      const whose = q.rate_source === 'provider' ? "the machine's own" : "the platform's";
      showRecord(ctx.json, q, [
        ['gpus', `${q.gpu_count} × ${q.gpu_model}`],
        ['base per hour', `${tokens(q.base_hourly_rate)} (${whose} rate ${tokens(q.base_rate_per_gpu)} a GPU)`],
        ['VRAM per hour', `${tokens(q.vram_hourly_rate)} (${gigabytes(q.requested_vram_mb)})`],
        ['power per hour', `${tokens(q.power_hourly_rate)} (${q.estimated_power_w} W)`],
        ['per hour', tokens(q.total_hourly_rate)],
        ['hours', q.duration_hours],
        ['total', tokens(q.total_cost)],
        ['platform fee (of it)', tokens(q.platform_fee)],
        ['machine earns', tokens(q.provider_earnings)],
      ]);
    });

  program
    .command('rates')
    .description(
      "the platform's rates: per GPU-hour by model (default: a model not listed), per GB of VRAM-hour and per " +
        "watt-hour, the market's factors, the platform's fee (its share of a payment, not added) and what a GB " +
        "stored costs an hour. A machine's " +
        'own rates replace them for its sessions: gpu provider rates show <machine-id>; gpu quote prices a rental',
    )
    .action(async () => {
      const ctx = context(program);
      const r = unwrap(await ctx.billing.GET('/api/v1/pricing/rates'));
      const models = Object.entries(r.base_rates).filter(([model]) => model !== 'default');
      showRecord(ctx.json, r, [
        ...models.map(([model, rate]): [string, string] => [`per GPU-hour: ${model}`, tokens(rate)]),
        ['per GPU-hour: any other model', tokens(r.default_rate)],
        ['per GB VRAM-hour', r.vram_rate_per_gb_hour],
        ['per watt-hour', r.power_rate_per_watt_hour],
        ['demand multiplier', r.demand_multiplier],
        ['supply factor', r.supply_factor],
        ['platform fee', `${r.platform_fee_percent}% of each payment`],
        ['storage, per GB-hour', `${r.storage_rate_per_gb_hour} (your charges: gpu storage usage)`],
      ]);
    });
}
