/**
 * `gpu`: the platform's command line for renters and providers (`pnpm gpu ...`, or the package's `gpu` bin), every call
 * through the typed client (`@gpu/client`) to the platform's one origin, the gateway: `--url`, else `GPU_URL`, else
 * the URL saved by `gpu login`, else `pnpm start`'s where PLATFORM_PORT_BASE/PLATFORM_HOST or its data folder place
 * it, else `http://127.0.0.1:8080` (platform-url.ts).
 *
 * Conventions: `--help` on every command; exit status 0, 1 (the platform refused or failed: one line on standard error
 * with the problem's code and detail, and what to run next where there is something), 2 (a usage error); `gpu run`
 * exits with its workload's exit code. `--json` prints the platform's answer as JSON for scripts, and a failure as
 * one JSON object on standard error (`{status, code, detail}`: problems.ts); no colour (`NO_COLOR` holds trivially);
 * no secret is ever printed but the key `gpu keys create` makes, once.
 */
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
import { platformUrl } from './platform-url.ts';
import { type Credential, problemLine, problemOf } from './problems.ts';

/** Whether the command line asks for JSON (`--json` before any `--`): known before commander has parsed it. */
function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

function build(json: boolean): Command {
  const program = new Command('gpu')
    .description(
      "The GPU rental platform's command line: offers, rentals and workloads, storage, wallets, keys, SSH keys",
    )
    .option(
      '--url <url>',
      "the platform (its gateway); default GPU_URL, the saved one, pnpm start's (PLATFORM_PORT_BASE, its data " +
        'folder) or http://127.0.0.1:8080',
    )
    .option('--json', 'print the answer as JSON (and a failure as JSON on standard error)')
    .showHelpAfterError(!json)
    .exitOverride();
  // Subcommands copy the output settings when they are made: set before them.
  if (json) {
    program.configureOutput({
      outputError: (message, write) =>
        write(
          `${problemLine({ status: null, code: 'USAGE_ERROR', detail: message.replace(/^error: /, '').trim() }, true)}\n`,
        ),
    });
  }
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

/** Who the run acts as, for what a refused credential's problem says. */
function credentialOf(env: NodeJS.ProcessEnv): Credential {
  if (env.GPU_API_KEY) return 'GPU_API_KEY';
  const saved = readConfig(env);
  if (saved.api_key) return 'saved key';
  return saved.refresh_token ? 'sign-in' : 'none';
}

async function main(argv: string[]): Promise<number> {
  const json = wantsJson(argv.slice(2));
  const program = build(json);
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
    const found = platformUrl(globals.url, process.env, readConfig(process.env).url);
    const platform = `the platform at ${found.url} (${found.from})`;
    const line = problemLine(problemOf(err, platform, credentialOf(process.env)), json);
    process.stderr.write(json ? `${line}\n` : `gpu: ${line}\n`);
    return err instanceof UsageError ? 2 : 1;
  }
}

process.exitCode = await main(process.argv);
