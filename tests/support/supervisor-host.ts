/**
 * A supervisor in a process of its own, for tests/supervisor.test.ts to kill as a `pnpm start` can be killed: runs
 * the children named on its command line under a Supervisor, each a Node program (`node -e <body>`) with the lifeline
 * preloaded as `pnpm start` preloads it (scripts/lib/lifeline.ts), logs each start as `pnpm start` does
 * (`[start] <name> started (pid N)`) on standard output, and waits.
 *   node --import tsx tests/support/supervisor-host.ts '{"<name>": "<body>", ...}' <lifeline grace ms>
 */
import { Supervisor } from '../../scripts/lib/supervisor.ts';

const [children, graceMs] = process.argv.slice(2);
const lifeline = new URL('../../scripts/lib/lifeline.ts', import.meta.url).href;
const supervisor = new Supervisor({
  lifelineGraceMs: Number(graceMs),
  log: (line) => process.stdout.write(`${line}\n`),
  output: (name, _stream, line) => process.stdout.write(`[${name}] ${line}\n`),
});
for (const [name, body] of Object.entries(JSON.parse(children ?? '{}') as Record<string, string>)) {
  supervisor.start({ name, args: ['--import', 'tsx', '--import', lifeline, '-e', body], cwd: process.cwd() });
}
setInterval(() => {}, 60_000);
