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
/** The table's rows: each begins with the commands it is about in backticks (`storage ls [path]`, `keys list [--all]`). */
const rows = readme.split('\n').filter((line) => line.startsWith('| `'));

/**
 * The rows about a command: its words at the start of a backticked name in the first cell; with the rows of a command
 * whose options it takes (`run [--download <dir>] [rent's options] -- <argv...>`).
 */
function rowsNaming(words: string): string[] {
  const parts = words.split(' ');
  // `provider machines [list]`: a default subcommand is written in brackets.
  const bracketed = [...parts.slice(0, -1), `[${parts.at(-1)}]`].join(' ');
  const named = new RegExp(`\`(${literal(words)}|${literal(bracketed)})[\` ]`);
  const own = rows.filter((row) => named.test(row.split(/(?<!\\)\|/)[1] ?? ''));
  const borrowed = own.flatMap((row) => [...row.matchAll(/\[([a-z-]+)'s options\]/g)].map((m) => m[1]!));
  return [...own, ...borrowed.flatMap(rowsNaming)];
}

describe("the CLI's README", () => {
  it('has a row for every command gpu --help shows', () => {
    expect(commands.length).toBeGreaterThan(50);
    const leaves = commands.filter(([, c]) => help.visibleCommands(c).every((s) => s.name() === 'help'));
    expect(leaves.map(([words]) => words).filter((words) => rowsNaming(words).length === 0)).toEqual([]);
  });

  it("names every option of every command in the command's own row", () => {
    const missing = commands.flatMap(([words, c]) => {
      const text = rowsNaming(words).join('\n');
      return help
        .visibleOptions(c)
        .filter((o) => o.long !== '--help')
        .filter((o) => ![o.long, o.short].some((flag) => flag && new RegExp(`${literal(flag)}\\b`).test(text)))
        .map((o) => `${words} ${o.long}`);
    });
    expect(missing).toEqual([]);
  });
});

function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
