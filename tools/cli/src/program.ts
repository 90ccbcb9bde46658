/** The `gpu` command line as a function (main.ts runs it; `pnpm wallet` runs it in its own process). */
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

/** The command line, its every command and option (`json`: failures as JSON on standard error). */
export function build(json: boolean): Command {
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

/**
 * Runs the command line `argv` (node, script, arguments): its exit status. `errors: 'text'` keeps failures as one line
 * of text even with `--json` (`pnpm wallet`, which asks for JSON answers on the user's behalf).
 */
export async function main(argv: string[], opts: { errors?: 'text' } = {}): Promise<number> {
  const json = wantsJson(argv.slice(2)) && opts.errors !== 'text';
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
    let platform = 'the platform';
    try {
      const found = platformUrl(globals.url, process.env, readConfig(process.env).url);
      platform = `the platform at ${found.url} (${found.from})`;
    } catch {
      // A setting that names no platform: that setting's own failure is the one said.
    }
    const line = problemLine(problemOf(err, platform, credentialOf(process.env)), json);
    process.stderr.write(json ? `${line}\n` : `gpu: ${line}\n`);
    return err instanceof UsageError ? 2 : 1;
  }
}
