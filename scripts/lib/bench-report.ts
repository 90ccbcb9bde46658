/**
 * Benchmarks write their results into their own section of docs/benchmarks.md,
 * between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, leaving the others.
 */
import { execSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const FILE = fileURLToPath(new URL('../../docs/benchmarks.md', import.meta.url));
const HEADER = `# Benchmarks

Each section is written by \`pnpm bench <name>\` on the machine named in it; run it again to refresh.
Targets come from the issues that asked for each benchmark.
`;

/** A one-line description of the machine, for the section header. */
export function machineLine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  let commit = 'uncommitted';
  try {
    commit = execSync('git rev-parse --short HEAD', { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {}
  return `${new Date().toISOString()} · ${os.cpus().length} × ${cpu} · ${Math.round(os.totalmem() / 1024 ** 3)} GiB · Node ${process.version} · commit ${commit}`;
}

/** Replaces (or appends) the named section with `markdown`. */
export function writeBenchSection(name: string, markdown: string): void {
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
