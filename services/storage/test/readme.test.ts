/**
 * The README stays in step with the code: its error table names every code the service answers with, and its
 * configuration table every setting the service reads.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { storageConfigSchema } from '../src/config.ts';
import { accessErrors } from '../src/domain/access.ts';
import { storageErrors } from '../src/errors.ts';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

/** The text of one `## ` section of the README. */
function section(title: string): string {
  const start = readme.indexOf(`\n## ${title}\n`);
  expect(start, `README section ${title}`).toBeGreaterThan(-1);
  const end = readme.indexOf('\n## ', start + 1);
  return readme.slice(start, end === -1 ? undefined : end);
}

/** The code of each named error factory, called with stand-in arguments. */
function codesOf(factories: Record<string, (...args: never[]) => unknown>): string[] {
  return Object.values(factories).map((make) => (make as (...args: unknown[]) => { code: string })('x', 1).code);
}

/**
 * Codes a route answers with that come from the platform's shared stack (validation, tokens, roles, cursors, the
 * store adapter, timeouts) rather than from this service's factories.
 */
const SHARED_CODES = [
  'VALIDATION_ERROR',
  'MALFORMED_JSON',
  'INVALID_CURSOR',
  'MISSING_TOKEN',
  'INVALID_TOKEN',
  'TOKEN_EXPIRED',
  'ROLE_REQUIRED',
  'OBJECT_STORE_ERROR',
  'DEPENDENCY_UNAVAILABLE',
  'REQUEST_TIMEOUT',
];
/** Raised only inside the service (a claim of a bucket's owner record that lost a race), never answered. */
const INTERNAL_CODES = ['PRECONDITION_FAILED'];

/** Every setting's dotted name, from the schema's defaults. */
function settingNames(value: unknown, prefix = ''): string[] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [prefix.slice(0, -1)];
  return Object.entries(value).flatMap(([k, v]) => settingNames(v, `${prefix}${k}.`));
}

describe('the README', () => {
  it('names every error code the service answers with in its error table', () => {
    const errors = section('Errors');
    const codes = [...codesOf(storageErrors), ...codesOf(accessErrors), ...SHARED_CODES].filter(
      (code) => !INTERNAL_CODES.includes(code),
    );
    const missing = codes.filter((code) => !errors.includes(`\`${code}\``));
    expect(missing).toEqual([]);
  });

  it('describes every setting in its configuration table', () => {
    const table = section('Configuration');
    const names = settingNames(storageConfigSchema.parse({}));
    // A row names a key in full (`object_store.part_size`) or, beside its sibling, by its last part
    // (`part_size` / `queue_size`); `registry.registration.*` lists its keys in the row's text.
    const missing = names.filter((name) => {
      const last = name.split('.').pop();
      return !table.includes(`\`${name}\``) && !(name.includes('.') && table.includes(`\`${last}\``));
    });
    expect(missing).toEqual([]);
  });
});
