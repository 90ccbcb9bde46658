/**
 * `pnpm bench startup [--runs 3] [--cwd DIR] [--first-start]`: how long `pnpm start` takes to bring every service up
 * healthy on a fresh data folder (issue #18: under 10 s). With `--first-start` the first run starts as the first
 * `pnpm start` after a clone does: the compiled programs' build record and the empty template database are removed
 * first, so it compiles everything and makes the template; it is reported apart from the later runs. Each run starts `pnpm start` with a new PLATFORM_DATA_DIR, times from
 * the spawn until every service's `/health` has answered 200, notes when each process reached each phase of its
 * start (from the lines it logs) and how much CPU each had used by then, and stops it as Ctrl-C would (SIGINT to its
 * process group). Before each run it waits (up to BENCH_LOAD_WAIT_S, default 120 s) for the 1-minute load average to
 * fall under BENCH_MAX_LOAD (default 1.5) and records the load it started under.
 *
 * The platform runs at PLATFORM_PORT_BASE (default 28100); `--cwd` starts the platform of another checkout (a
 * before/after comparison), timed the same way; BENCH_NODE runs the start script, and so the platform, on that Node
 * (a comparison of Node versions). With BENCH_ONLY set the section is printed, not written.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { buildInfoFile } from './lib/build.ts';
import { pgliteTemplateDir, platformPorts, portOpen, repoRoot } from './lib/platform.ts';
import { answerHelp } from './lib/usage.ts';

answerHelp(`usage: pnpm bench startup [--runs 3] [--cwd DIR] [--first-start]

Times pnpm start on a fresh data folder, from the spawn until every service answers /health, and writes the
startup section of docs/benchmarks.md (BENCH_ONLY=1: prints it).
  --runs N         how many starts (default 3)
  --cwd DIR        start the platform of another checkout (a before/after comparison)
  --first-start    the first run starts as the first pnpm start after a clone (compiles, makes the template)
Environment: PLATFORM_PORT_BASE (default 28100), BENCH_NODE (another Node), BENCH_MAX_LOAD (default 1.5) and
BENCH_LOAD_WAIT_S (default 120): how idle the machine must be before each run.`);

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    cwd: { type: 'string', default: repoRoot },
    'first-start': { type: 'boolean', default: false },
  },
});
const runs = Number(values.runs);
const cwd = path.resolve(values.cwd);
const firstStart = values['first-start'];
// Empty counts as unset, as for every PLATFORM_* setting (scripts/lib/platform.ts).
const portBase = process.env.PLATFORM_PORT_BASE || '28100';
const ports = platformPorts({ PLATFORM_PORT_BASE: portBase });
const SERVICES = {
  auth: ports.auth,
  storage: ports.storage,
  'provider-registry': ports.registry,
  billing: ports.billing,
};
const TARGET_S = 10;
const maxLoad = Number(process.env.BENCH_MAX_LOAD ?? 1.5);
const loadWaitS = Number(process.env.BENCH_LOAD_WAIT_S ?? 120);
const CLK_TCK = 100;

/**
 * What a process logs when it reaches a phase of its start: the first line of its output matching the pattern (the
 * last one with `last`).
 */
const PHASES: { name: string; pattern: RegExp; last?: boolean }[] = [
  { name: 'database opened', pattern: /"msg":"database opened"/ },
  { name: 'migrated', pattern: /"msg":"migration applied"/, last: true },
  { name: 'admin and clients', pattern: /"msg":"(initial admin checked|platform client secret written)"/, last: true },
  { name: 'store reachable', pattern: /object store connection test passed/ },
  { name: 'chain connected', pattern: /"msg":"connected to Solana"/ },
  { name: 'listening', pattern: /"msg":"[a-z-]+ listening"|s3rver listening|JSON-RPC on/ },
  { name: 'chain set up', pattern: /setup done/ },
];

interface Line {
  at: number;
  text: string;
}

interface Run {
  load: number;
  /** Seconds from spawn until every service answered 200 on /health. */
  total: number;
  healthy: Record<string, number>;
  /** Process name → seconds at which it was started and reached each phase. */
  phases: Record<string, Record<string, number>>;
  /** Process name → CPU seconds used (itself and its children) when every service was healthy. */
  cpu: Record<string, number>;
  built?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load1 = () => os.loadavg()[0] as number;

async function healthy(port: number): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

/** Every process on the machine: pid → parent pid and CPU ticks (user + system) so far. */
function processTable(): Map<number, { ppid: number; ticks: number }> {
  const table = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces) in parentheses.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(entry), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {}
  }
  return table;
}

/** CPU seconds of a process and its descendants alive now, leaving out the subtrees of the `skip` pids. */
function treeCpu(table: ReturnType<typeof processTable>, pid: number, skip: ReadonlySet<number> = new Set()): number {
  let seconds = (table.get(pid)?.ticks ?? 0) / CLK_TCK;
  for (const [child, p] of table) if (p.ppid === pid && !skip.has(child)) seconds += treeCpu(table, child, skip);
  return seconds;
}

async function waitForQuiet(): Promise<void> {
  const deadline = Date.now() + loadWaitS * 1000;
  if (load1() >= maxLoad)
    process.stdout.write(`load ${load1().toFixed(2)}: waiting up to ${loadWaitS} s for < ${maxLoad}\n`);
  while (load1() >= maxLoad && Date.now() < deadline) await sleep(2000);
}

async function stopGroup(child: ChildProcess, exited: Promise<unknown>): Promise<void> {
  const pid = child.pid as number;
  process.kill(-pid, 'SIGINT');
  const done = await Promise.race([exited.then(() => true), sleep(30_000).then(() => false)]);
  if (!done) {
    process.stderr.write('pnpm start did not stop within 30 s of SIGINT: killing its process group\n');
    process.kill(-pid, 'SIGKILL');
    await exited;
  }
}

async function oneRun(index: number): Promise<Run> {
  for (const port of Object.values(ports))
    if (await portOpen(port)) throw new Error(`port ${port} is in use: set PLATFORM_PORT_BASE to free ports`);
  await waitForQuiet();
  const load = load1();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'bench-startup-'));
  const lines: Line[] = [];
  const t0 = performance.now();
  const t0Wall = Date.now();
  // BENCH_NODE: the start script on that Node (which then runs every process it starts), not `pnpm start` (whose
  // scripts find the project's own Node first).
  const [command, args] = process.env.BENCH_NODE
    ? [process.env.BENCH_NODE, ['--import', 'tsx', 'scripts/start.ts']]
    : ['pnpm', ['-s', 'start']];
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, PLATFORM_DATA_DIR: dataDir, PLATFORM_PORT_BASE: portBase, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const exited = new Promise((r) => child.once('exit', r));
  for (const stream of [child.stdout, child.stderr]) {
    let buf = '';
    stream.on('data', (d: Buffer) => {
      const at = (performance.now() - t0) / 1000;
      buf += d.toString();
      const parts = buf.split('\n');
      buf = parts.pop() ?? '';
      for (const text of parts) lines.push({ at, text });
    });
  }
  const healthyAt: Record<string, number> = {};
  let cpu: Record<string, number> = {};
  try {
    const deadline = Date.now() + 180_000;
    while (Object.keys(healthyAt).length < Object.keys(SERVICES).length) {
      if (child.exitCode !== null) throw new Error(`pnpm start exited (${child.exitCode})`);
      if (Date.now() > deadline) throw new Error('not every service healthy within 180 s');
      await Promise.all(
        Object.entries(SERVICES).map(async ([name, port]) => {
          if (healthyAt[name] === undefined && (await healthy(port))) healthyAt[name] = (performance.now() - t0) / 1000;
        }),
      );
      await sleep(25);
    }
    cpu = cpuByProcess(lines, child.pid as number);
    // What the processes logged went to their log files (pnpm start keeps it off its terminal), timed by its own time.
    lines.push(...loggedLines(dataDir, t0Wall));
    lines.sort((a, b) => a.at - b.at);
  } catch (err) {
    process.stderr.write(
      `${lines
        .map((l) => l.text)
        .join('\n')
        .slice(-4000)}\n`,
    );
    throw err;
  } finally {
    await stopGroup(child, exited);
    rmSync(dataDir, { recursive: true, force: true });
  }
  const run: Run = {
    load,
    total: Math.max(...Object.values(healthyAt)),
    healthy: healthyAt,
    phases: phasesOf(lines),
    cpu,
    built: lines.find((l) => /^\[start\] compiled /.test(l.text))?.text.slice('[start] '.length),
  };
  process.stdout.write(
    `run ${index}: ${run.total.toFixed(2)} s (load ${load.toFixed(2)})${run.built ? `; ${run.built}` : ''}\n`,
  );
  return run;
}

/**
 * The JSON lines each process logged into its file in the data folder (`<data>/logs/<name>.log`), as `[name] <line>`
 * at the time the line says, from the spawn (`t0Wall`); none from a checkout whose pnpm start printed them instead.
 */
function loggedLines(dataDir: string, t0Wall: number): Line[] {
  const dir = path.join(dataDir, 'logs');
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((file) => file.endsWith('.log') && file !== 'start.log')
    .flatMap((file) =>
      readFileSync(path.join(dir, file), 'utf8')
        .split('\n')
        .flatMap((text) => {
          if (!text.startsWith('{')) return [];
          let time: number;
          try {
            time = Date.parse((JSON.parse(text) as { time?: string }).time ?? '');
          } catch {
            return [];
          }
          return Number.isNaN(time) ? [] : [{ at: (time - t0Wall) / 1000, text: `[${file.slice(0, -4)}] ${text}` }];
        }),
    );
}

/** The supervised processes' pids from the `[start] NAME started (pid N)` lines, and `pnpm start` itself. */
function cpuByProcess(lines: Line[], groupPid: number): Record<string, number> {
  const table = processTable();
  const cpu: Record<string, number> = {};
  const pids = new Set<number>();
  for (const l of lines) {
    const m = /^\[start\] (\S+) started \(pid (\d+)\)/.exec(l.text);
    if (!m) continue;
    const pid = Number(m[2]);
    pids.add(pid);
    cpu[m[1] as string] = treeCpu(table, pid);
  }
  // `pnpm start` and the start script, without the supervised processes counted above.
  cpu['pnpm start'] = treeCpu(table, groupPid, pids);
  return cpu;
}

function phasesOf(lines: Line[]): Record<string, Record<string, number>> {
  const phases: Record<string, Record<string, number>> = {};
  for (const l of lines) {
    const started = /^\[start\] (\S+) started \(pid/.exec(l.text);
    if (started) {
      phases[started[1] as string] ??= { started: l.at };
      continue;
    }
    const own = /^\[([a-z0-9-]+)\] (.*)$/.exec(l.text);
    if (!own || own[1] === 'start') continue;
    const name = own[1] as string;
    phases[name] ??= {};
    const p = phases[name];
    for (const phase of PHASES)
      if ((phase.last || p[phase.name] === undefined) && phase.pattern.test(own[2] as string)) p[phase.name] = l.at;
  }
  return phases;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};
const fmt = (s: number | undefined) => (s === undefined ? '–' : s.toFixed(1));

function report(all: Run[]): string {
  // With --first-start, the first run is reported on its own and the rest are the later starts.
  const first = firstStart ? all[0] : undefined;
  const results = first && all.length > 1 ? all.slice(1) : all;
  const totals = results.map((r) => r.total);
  const med = median(totals);
  const names = [...new Set(results.flatMap((r) => Object.keys(r.phases)))];
  const phaseNames = ['started', ...PHASES.map((p) => p.name)].filter((p) =>
    results.some((r) => Object.values(r.phases).some((ph) => ph[p] !== undefined)),
  );
  const medianOf = (pick: (r: Run) => number | undefined) => {
    const xs = results.map(pick).filter((x): x is number => x !== undefined);
    return xs.length > 0 ? median(xs) : undefined;
  };
  const phaseRows = names.map((n) => {
    const cols = phaseNames.map((p) => fmt(medianOf((r) => r.phases[n]?.[p])));
    return `| ${n} | ${cols.join(' | ')} | ${fmt(medianOf((r) => r.healthy[n]))} | ${fmt(medianOf((r) => r.cpu[n]))} |`;
  });
  const own = medianOf((r) => r.cpu['pnpm start']);
  const cpuTotal = medianOf((r) => Object.values(r.cpu).reduce((a, b) => a + b, 0));
  const built = results.find((r) => r.built)?.built;
  return `## startup

\`pnpm bench startup\` — ${machineLine(cwd)}

\`pnpm start\` on a fresh data folder (a new PLATFORM_DATA_DIR each run), timed from the spawn of \`pnpm start\` until
every service's \`/health\` has answered 200, ${all.length} runs${cwd === path.resolve(repoRoot) ? '' : ` of the checkout in \`${cwd}\``}.
Each run waited for the 1-minute load average to fall under ${maxLoad} (at most ${loadWaitS} s) and records the load it
started under.

| run | all healthy | load at start | ${Object.keys(SERVICES).join(' | ')} |
|---|---|---|${Object.keys(SERVICES)
    .map(() => '---|')
    .join('')}
${all
  .map(
    (r, i) =>
      `| ${i + 1}${r === first ? ' (first start after a clone)' : ''} | ${r.total.toFixed(2)} s | ${r.load.toFixed(2)} | ${Object.keys(
        SERVICES,
      )
        .map((n) => `${fmt(r.healthy[n])} s`)
        .join(' | ')} |`,
  )
  .join('\n')}

${
  first
    ? `**First start after a clone: ${first.total.toFixed(2)} s** (${first.built ?? 'nothing compiled'}, and the template database made). Later starts on a fresh data folder: `
    : ''
}**min ${Math.min(...totals).toFixed(2)} s, median ${med.toFixed(2)} s** (target < ${TARGET_S} s: ${
    med < TARGET_S ? 'met' : '**missed**'
  }).${built && !first ? ` The first run compiled the programs first (${built}).` : ''}

Where the time goes (medians, seconds from the spawn of \`pnpm start\`, when each process logged reaching each phase;
CPU: what the process had used when every service was healthy):

| process | ${phaseNames.join(' | ')} | healthy | CPU s |
|---|${phaseNames.map(() => '---|').join('')}---|---|
${phaseRows.join('\n')}
| \`pnpm start\` itself (pnpm, start script) | ${phaseNames.map(() => '').join(' | ')} | | ${fmt(own)} |

CPU used by all of them together: ${fmt(cpuTotal)} s, on ${os.cpus().length} cores.
`;
}

if (!Number.isInteger(runs) || runs < 1) throw new Error('--runs must be a positive integer');
if (!existsSync(path.join(cwd, 'scripts', 'start.ts'))) throw new Error(`${cwd} has no scripts/start.ts`);
if (firstStart) {
  // What a clone does not have: the build record (so everything is compiled) and the template database.
  rmSync(buildInfoFile(cwd), { force: true });
  rmSync(pgliteTemplateDir(cwd), { recursive: true, force: true });
}
const results: Run[] = [];
for (let i = 1; i <= runs; i++) results.push(await oneRun(i));
writeBenchSection('startup', report(results));
