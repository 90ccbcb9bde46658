/** The market: `offers` (machines with free GPUs) and `quote` (a machine's price for a rental). */
import { unwrap } from '@gpu/client';
import { type Command, Option } from 'commander';
import { context, count, show } from '../cli.ts';

export function marketCommands(program: Command) {
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
}
