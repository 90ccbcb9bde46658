/**
 * Benchmarks write their results into their own section of docs/benchmarks.md,
 * between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, leaving the others.
 */
import { execSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const FILE = fileURLToPath(new URL('../../../docs/benchmarks.md', import.meta.url));
const HEADER = `# Benchmarks

Each section is written by \`pnpm bench <name>\` on the machine named in it; run it again to refresh.
Targets come from the issues that asked for each benchmark.

Each header ends with a CPU gauge: the time a fixed single-threaded JavaScript workload took when the benchmark
started and when it ended (lower is faster). The development VM's host speed drifts: the same gauge has read from
about 830 to 2,160 ms within an hour, and every throughput here moves with it, so compare runs with similar gauges.
`;

/** Milliseconds a fixed single-threaded workload (allocation, string building, JSON) takes: the host's speed now. */
function cpuGauge(): number {
  const started = performance.now();
  let bytes = 0;
  let batch: { i: number; s: string }[] = [];
  for (let i = 0; i < 3_000_000; i++) {
    const o = { i, s: `k${i}` };
    batch.push(o);
    if (batch.length > 1000) batch = [];
    bytes += JSON.stringify(o).length;
  }
  if (bytes === 0) throw new Error('unreachable');
  return Math.round(performance.now() - started);
}

/** Gauged when the benchmark loads this module, before it starts measuring. */
const gaugeAtStart = cpuGauge();

/**
 * A one-line description of the machine, for the section header, with the CPU gauge at start and now, and the commit
 * measured (that of `cwd`, the checkout a benchmark ran: this one unless it was told another).
 */
export function machineLine(cwd = process.cwd()): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  let commit = 'uncommitted';
  try {
    commit = execSync('git rev-parse --short HEAD', { cwd, stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {}
  return `${new Date().toISOString()} · ${os.cpus().length} × ${cpu} · ${Math.round(os.totalmem() / 1024 ** 3)} GiB · Node ${process.version} · commit ${commit} · CPU gauge ${gaugeAtStart} → ${cpuGauge()} ms${hugePages()}`;
}

/**
 * The machine's huge pages in use (PostgreSQL's shared buffers, where `pnpm bench` could reserve them), as a suffix of
 * the machine line; empty where none are reserved.
 */
function hugePages(): string {
  let info = '';
  try {
    info = readFileSync('/proc/meminfo', 'utf8');
  } catch {
    return '';
  }
  const read = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  const total = read('HugePages_Total');
  if (total === 0) return '';
  const taken = total - read('HugePages_Free') + read('HugePages_Rsvd');
  return ` · ${taken} of ${total} huge pages (${read('Hugepagesize') / 1024} MB) taken`;
}

/**
 * Prints the named section and replaces (or appends) it in docs/benchmarks.md; with `BENCH_ONLY` set (a trial
 * run), only prints it.
 */
export function writeBenchSection(name: string, markdown: string): void {
  process.stdout.write(`${markdown.trim()}\n`);
  if (process.env.BENCH_ONLY) return;
  const start = `<!-- bench:${name} -->`;
  const end = `<!-- /bench:${name} -->`;
  const current = existsSync(FILE) ? readFileSync(FILE, 'utf8') : HEADER;
  const block = `${start}\n${markdown.trim()}\n${end}`;
  const i = current.indexOf(start);
  const j = current.indexOf(end);
  const next =
    i >= 0 && j > i
      ? current.slice(0, i) + block + current.slice(j + end.length)
      : `${current.trimEnd()}\n\n${block}\n`;
  writeFileSync(FILE, next);
}
