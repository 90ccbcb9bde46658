/**
 * The README's table of commands ("Every command") is the command line's: every command `gpu --help` lists (and each
 * of its subcommands) has a row there, and every option those commands take is named in it (its long form, or its short one
 * where the README uses that: `-f`, `-t`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { build } from '../src/program.ts';

const readme = readFileSync(join(import.meta.dirname, '..', 'README.md'), 'utf8');
const program = build(false);
const help = program.createHelp();

/** Every command a user can see, with its words (`wallet balance`), depth first. */
function visible(command: Command, words: string[] = []): [string, Command][] {
  return help
    .visibleCommands(command)
    .filter((c) => c.name() !== 'help')
    .flatMap((c) => {
      const path = [...words, c.name()];
      return [[path.join(' '), c] as [string, Command], ...visible(c, path)];
    });
}

const commands = visible(program);
/** The table's rows: each begins with the command in backticks (`storage ls [path]`, `keys list [--all]`, ...). */
const rows = readme.split('\n').filter((line) => line.startsWith('| `'));

describe("the CLI's README", () => {
  it('has a row for every command gpu --help shows', () => {
    expect(commands.length).toBeGreaterThan(50);
    const leaves = commands.filter(([, c]) => help.visibleCommands(c).every((s) => s.name() === 'help'));
    const missing = leaves
      .map(([words]) => words)
      .filter((words) => {
        const parts = words.split(' ');
        // `provider machines [list]`: a default subcommand is written in brackets.
        const bracketed = [...parts.slice(0, -1), `[${parts.at(-1)}]`].join(' ');
        return !rows.some((row) => [words, bracketed].some((w) => new RegExp(`\`${literal(w)}[\` ]`).test(row)));
      });
    expect(missing).toEqual([]);
  });

  it('names every option of every command', () => {
    const missing = commands.flatMap(([words, c]) =>
      help
        .visibleOptions(c)
        .filter((o) => o.long !== '--help')
        .filter((o) => ![o.long, o.short].some((flag) => flag && new RegExp(`${literal(flag)}\\b`).test(readme)))
        .map((o) => `${words} ${o.long}`),
    );
    expect(missing).toEqual([]);
  });
});

function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
