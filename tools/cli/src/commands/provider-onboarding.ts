/**
 * A machine onboarded without curl: `gpu provider machines add` registers it at the registry (bound to no daemon yet:
 * the first daemon that attaches under its name claims it), and `gpu provider daemon-credentials` creates the
 * machine's daemon client at auth and writes auth's answer, as it is, to the daemon's credentials file (mode 0600,
 * never over a file that exists: the secret is shown once).
 */
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import path from 'node:path';
import { type RegistrySchemas, unwrap } from '@gpu/client';
import { type Command, InvalidArgumentError } from 'commander';
import { type Context, context, count, showRecord } from '../cli.ts';

type NewGpu = RegistrySchemas['RegisterProviderRequest']['gpus'][number];

/** `[<n>x]<model>:<VRAM in MB>:<driver version>`: `8xNVIDIA H100 80GB HBM3:81559:580.65.06`. */
const GPU_SPEC = /^(?:(\d+)x)?([^:]+):(\d+):([^:\s]+)$/;

/** A `--gpu` value as that many GPUs, after the ones before; a usage error naming the form. */
function gpuSpec(value: string, previous: NewGpu[] = []): NewGpu[] {
  const m = GPU_SPEC.exec(value.trim());
  const n = Number(m?.[1] ?? 1);
  if (!m || n < 1 || n > 64) {
    throw new InvalidArgumentError(
      'takes [COUNTx]MODEL:VRAM_MB:DRIVER, such as 8xNVIDIA H100 80GB HBM3:81559:580.65.06',
    );
  }
  const gpu = { model_name: m[2]!.trim(), vram: Number(m[3]), driver_version: m[4]! };
  return [...previous, ...Array.from({ length: n }, () => ({ ...gpu }))];
}

export function machineOnboarding(program: Command, provider: Command, machines: Command) {
  machines
    .command('add <name>')
    .description(
      'register a machine of yours by its name (unique among your machines) and GPUs; its daemon, started with ' +
        'provider.name set to it, takes it over and keeps its GPUs up to date',
    )
    .requiredOption(
      '--gpu <spec>',
      'its GPUs, repeatable: [COUNTx]MODEL:VRAM_MB:DRIVER (8xH100:81559:580.65.06)',
      gpuSpec,
    )
    .option('--hostname <host>', 'its host name')
    .option('--location <where>', 'its region (renters search by it)')
    .option('--min-gpus <n>', 'the smallest group of its GPUs one rental may take', count('--min-gpus'))
    .option('--held', 'keep it off the market until you release it (its status busy)')
    .action(
      async (
        name: string,
        opts: { gpu: NewGpu[]; hostname?: string; location?: string; minGpus?: number; held?: boolean },
      ) => {
        const ctx = context(program);
        const me = unwrap(await ctx.auth.GET('/api/v1/auth/me'));
        const m = unwrap(
          await ctx.registry.POST('/providers', {
            body: {
              owner_id: me.id,
              name,
              gpus: opts.gpu,
              ...(opts.hostname ? { hostname: opts.hostname } : {}),
              ...(opts.location ? { location: opts.location } : {}),
              ...(opts.minGpus ? { min_gpus_per_rental: opts.minGpus } : {}),
              ...(opts.held ? { status: 'busy' as const } : {}),
            },
          }),
        );
        showRecord(ctx.json, m, [
          ['id', m.id],
          ['name', m.name],
          ['status', m.status],
          ['gpus', m.gpus.length],
          ['next', `gpu provider daemon-credentials ${m.name} --out credentials.json`],
        ]);
      },
    );

  provider
    .command('daemon-credentials <name>')
    .description(
      "create a machine's daemon client (its own credentials: the daemon acts for you, and for that machine alone) " +
        "and write them to --out, mode 0600, as the daemon's credentials.file; the secret is in that file only",
    )
    .requiredOption('--out <file>', 'the credentials file to write (it must not exist)')
    .action(async (name: string, opts: { out: string }) => {
      const ctx = context(program);
      const file = path.resolve(opts.out);
      // The file first: a client whose secret could not be kept would be of no use to anyone.
      let fd: number;
      try {
        fd = openSync(file, 'wx', 0o600);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new Error(
          `cannot write ${file}: ${code === 'EEXIST' ? 'it exists (new credentials never replace a file)' : code}`,
        );
      }
      let made: Awaited<ReturnType<typeof createClient>>;
      try {
        made = await createClient(ctx, name);
        writeSync(fd, `${JSON.stringify(made, null, 2)}\n`);
      } catch (err) {
        rmSync(file, { force: true });
        throw err;
      } finally {
        closeSync(fd);
      }
      showRecord(ctx.json, { client: made.client, file }, [
        ['client', made.client_id],
        ['name', made.client.name],
        ['file', `${file} (0600)`],
        ['next', `credentials: { file: ${file} } in the daemon's configuration`],
      ]);
    });
}

/** A daemon client of the caller's at auth, with its secret (auth's answer: the daemon's credentials file). */
async function createClient(ctx: Context, name: string) {
  return unwrap(await ctx.auth.POST('/api/v1/auth/clients', { body: { name, role: 'daemon' } }));
}
