/**
 * What `pnpm demo` prints under each step, the command line it stands for (scripts/lib/demo-commands.ts), names
 * commands and options that are there: every `pnpm gpu ...` line is a command of the `gpu` command line (its own
 * `--help` says so, run as a person runs it) with every option it names, and every `pnpm <script>` line a script of
 * the checkout whose help names the subcommand and options used. And the demo's length, stated at its start, is the
 * one docs/demo.md states. (The whole demo runs in tests/start.test.ts.)
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { DEMO_COMMANDS, DEMO_MINUTES } from '../scripts/lib/demo-commands.ts';
import { root } from './support/platform-start.ts';

const run = promisify(execFile);

/** Every value a step names, as `<name>`: what each entry's lines are made of, whatever the values. */
const placeholders = new Proxy({} as Record<string, string>, { get: (_target, name) => `<${String(name)}>` });

/** Every command line the demo may print, with the step it belongs to. */
const lines = Object.entries(DEMO_COMMANDS).flatMap(([step, of]) => of(placeholders).map((line) => ({ step, line })));

/**
 * A command line's words (quoted ones kept whole), without the environment assignments before it, up to a `--`
 * (what follows is the workload's own).
 */
function words(line: string): string[] {
  const all = [...line.matchAll(/'[^']*'|"[^"]*"|\S+/g)].map((m) => m[0]);
  const start = all.findIndex((w) => !/^[A-Z_]+=/.test(w));
  const end = all.indexOf('--');
  return all.slice(start, end === -1 ? undefined : end);
}

/** The options a `--help` lists (`--gpu-model`, `-f`). */
const optionsOf = (help: string) =>
  new Set([...help.matchAll(/^\s+(?:(-\w), )?(--[a-z-]+)/gm)].flatMap((m) => m.slice(1)));

/** `--help` of a command of the checkout, as a person runs it. */
async function help(command: string[]): Promise<string> {
  const { stdout } = await run('pnpm', ['-s', ...command, '--help'], { cwd: root, timeout: 60_000 });
  return stdout;
}

/** `gpu --help` of a command path, run by the command line's own bin (what `pnpm gpu` runs). */
async function gpuHelp(commandPath: string[]): Promise<string> {
  const bin = path.join(root, 'tools/cli/bin/gpu.mjs');
  const { stdout } = await run(process.execPath, [bin, ...commandPath, '--help'], { cwd: root, timeout: 60_000 });
  return stdout;
}

describe('the commands pnpm demo prints under its steps', () => {
  it('are gpu commands with the options they name, or scripts of the checkout', { timeout: 120_000 }, async () => {
    const gpuLines = lines.filter(({ line }) => words(line)[0] === 'pnpm' && words(line)[1] === 'gpu');
    // Most steps stand for a gpu command; the rest are the checkout's scripts, the daemon's, curl and kill.
    expect(new Set(gpuLines.map((l) => l.step)).size).toBeGreaterThan(Object.keys(DEMO_COMMANDS).length / 2);
    const globals = optionsOf(await gpuHelp([]));
    // Each command path's help once, a few at a time.
    const paths = new Map<string, Promise<string>>();
    const pathOf = (w: string[]) => {
      const commandPath: string[] = [];
      for (const word of w.slice(2)) {
        if (!/^[a-z][a-z-]*$/.test(word)) break;
        commandPath.push(word);
      }
      return commandPath;
    };
    const pending = [...new Set(gpuLines.map(({ line }) => pathOf(words(line)).join(' ')))];
    const workers = Array.from({ length: 4 }, async () => {
      for (let next = pending.shift(); next !== undefined; next = pending.shift()) {
        const got = gpuHelp(next.split(' '));
        paths.set(next, got);
        await got;
      }
    });
    await Promise.all(workers);
    for (const { step, line } of gpuLines) {
      const w = words(line);
      const commandPath = pathOf(w);
      const text = await (paths.get(commandPath.join(' ')) as Promise<string>);
      expect(text, `${step}: ${line}`).toMatch(new RegExp(`^Usage: gpu ${commandPath.join(' ')} `, 'm'));
      const own = optionsOf(text);
      // Options, not `-` (standard output, as `cp` takes it).
      const named = w.filter((word) => /^--?[a-z]/.test(word)).map((word) => word.split('=')[0] as string);
      for (const option of named)
        expect(own.has(option) || globals.has(option), `${step}: ${option} in ${line}`).toBe(true);
    }
  });

  it("names the checkout's scripts with their own subcommands and options", { timeout: 120_000 }, async () => {
    const scripts = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: object }).scripts;
    const pnpmLines = lines
      .map(({ step, line }) => ({ step, line, w: words(line) }))
      .filter(({ w }) => w[0] === 'pnpm' && w[1] !== 'gpu');
    for (const { step, line, w } of pnpmLines) {
      if (w[1] === '--filter') {
        // The daemon as its README runs it: the package's own script.
        const pkg = JSON.parse(readFileSync(path.join(root, 'tools/provider-daemon/package.json'), 'utf8'));
        expect(w[2], line).toBe(pkg.name);
        expect(pkg.scripts[w[3] as string], `${step}: ${line}`).toBeDefined();
        continue;
      }
      expect(Object.keys(scripts), `${step}: ${line}`).toContain(w[1]);
      if (w.length === 2) continue;
      const text = await help([w[1] as string]);
      for (const word of w.slice(2).filter((x) => /^(--)?[a-z][a-z-]*$/.test(x)))
        expect(text, `${step}: ${word} in ${line}`).toContain(word);
    }
  });

  it('states the length docs/demo.md states', () => {
    const doc = readFileSync(path.join(root, 'docs/demo.md'), 'utf8');
    const stated = [...doc.matchAll(/about (\w+) minutes/g)].map((m) => m[1]);
    expect(stated).toEqual([String(DEMO_MINUTES)]);
  });
});
