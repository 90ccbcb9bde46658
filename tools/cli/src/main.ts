/**
 * `gpu`: the platform's command line for renters and providers (`pnpm gpu ...`, or the package's `gpu` bin), every call
 * through the typed client (`@gpu/client`) to the platform's one origin, the gateway: `--url`, else `GPU_URL`, else
 * the URL saved by `gpu login`, else `pnpm start`'s where PLATFORM_PORT_BASE/PLATFORM_HOST or its data folder place
 * it, else `http://127.0.0.1:8080` (platform-url.ts).
 *
 * Conventions: `--help` on every command; exit status 0, 1 (the platform refused or failed: one line on standard error
 * with the problem's code and detail), 2 (a usage error); `gpu run` exits with its workload's exit code. `--json`
 * prints the platform's answer as JSON for scripts; no colour (`NO_COLOR` holds trivially); no secret is ever printed
 * but the key `gpu keys create` makes, once.
 */
import { ApiError } from '@gpu/client';
import { Command, CommanderError } from 'commander';
import { ExitStatus, type Globals, UsageError } from './cli.ts';
import { accountCommands } from './commands/account.ts';
import { jobCommands } from './commands/jobs.ts';
import { marketCommands } from './commands/market.ts';
import { providerCommands } from './commands/provider.ts';
import { reachCommands } from './commands/reach.ts';
import { sessionCommands } from './commands/sessions.ts';
import { signupCommands } from './commands/signup.ts';
import { sshKeyCommands } from './commands/ssh-keys.ts';
import { storageCommands } from './commands/storage.ts';
import { walletCommands } from './commands/wallet.ts';
import { readConfig } from './config.ts';
import { type Found, platformUrl } from './platform-url.ts';

function build(): Command {
  const program = new Command('gpu')
    .description(
      "The GPU rental platform's command line: offers, rentals and workloads, storage, wallets, keys, SSH keys",
    )
    .option(
      '--url <url>',
      "the platform (its gateway); default GPU_URL, the saved one, pnpm start's (PLATFORM_PORT_BASE, its data " +
        'folder) or http://127.0.0.1:8080',
    )
    .option('--json', 'print the answer as JSON')
    .showHelpAfterError()
    .exitOverride();
  signupCommands(program);
  accountCommands(program);
  sshKeyCommands(program);
  marketCommands(program);
  sessionCommands(program);
  jobCommands(program);
  reachCommands(program);
  storageCommands(program);
  walletCommands(program);
  providerCommands(program);
  return program;
}

/** One line for a failure: the problem's code and detail (and its hint), never a stack. */
function describe(err: unknown, platform: () => Found): string {
  if (err instanceof ApiError) {
    const p = err.problem as { code?: string; detail?: string; title?: string; hint?: string };
    return `${p.code ?? err.status}: ${p.detail ?? p.title ?? 'refused'}${p.hint ? ` (${p.hint})` : ''}`;
  }
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (err instanceof TypeError && cause) {
    const { url, from } = platform();
    return `cannot reach the platform at ${url} (${from}): ${cause.code ?? cause.message}`;
  }
  return (err as Error).message;
}

async function main(argv: string[]): Promise<number> {
  const program = build();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof ExitStatus) return err.status;
    if (err instanceof CommanderError) {
      // --help and --version end here too, after printing.
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.exitCode === 0 ? 0 : 2;
    }
    const globals = program.opts<Globals>();
    const platform = () => platformUrl(globals.url, process.env, readConfig(process.env).url);
    process.stderr.write(`gpu: ${describe(err, platform)}\n`);
    return err instanceof UsageError ? 2 : 1;
  }
}

process.exitCode = await main(process.argv);
