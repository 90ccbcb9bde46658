/**
 * `--help` and `-h` for every command of the repository: asked first, before a command reads its settings, touches a
 * file or opens a port, so that asking how to use a command never does what it does.
 *
 *   answerHelp(USAGE);                  // first statement after the imports: prints USAGE and exits 0 when asked
 *   refuseArguments('pnpm demo');       // a command that takes none: any argument is one line and exit status 2
 */

/** The arguments before a `--` (what follows it belongs to another program). */
const ownArguments = (args: readonly string[]) => {
  const end = args.indexOf('--');
  return end === -1 ? args : args.slice(0, end);
};

/** Prints `usage` on standard output and exits 0 when the command line has `--help` or `-h`. */
export function answerHelp(usage: string, args: readonly string[] = process.argv.slice(2)): void {
  const own = ownArguments(args);
  if (!own.includes('--help') && !own.includes('-h')) return;
  process.stdout.write(`${usage.trim()}\n`);
  process.exit(0);
}

/** For a command that takes no arguments: refuses any, in one line, exit status 2. */
export function refuseArguments(command: string, args: readonly string[] = process.argv.slice(2)): void {
  if (args.length === 0) return;
  process.stderr.write(`${command}: takes no arguments, got ${args.join(' ')} (${command} --help shows how)\n`);
  process.exit(2);
}
