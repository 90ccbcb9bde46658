/**
 * The repository stands on its own: its Markdown links point at files it has (a clone has no `../shared`), and the
 * platform conventions and architecture notes are where the READMEs say.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { authConfigSchema } from '../services/auth/src/config.ts';
import { billingConfigSchema } from '../services/billing/src/config.ts';
import { registryConfigSchema } from '../services/provider-registry/src/config.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const SKIP = new Set(['node_modules', '.git', '.data', '.test-env', 'dist']);

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (SKIP.has(entry.name)) return [];
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return markdownFiles(full);
    return entry.name.endsWith('.md') ? [full] : [];
  });
}

const files = markdownFiles(root).map((f) => path.relative(root, f));

describe('the documentation', () => {
  it('has the conventions and architecture notes, linked from the README', () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    expect(readme).toContain('(docs/conventions.md)');
    expect(readme).toContain('(docs/architecture.md)');
  });

  it.each(files)('%s points at no file outside the repository and at no missing file', (file) => {
    const text = readFileSync(path.join(root, file), 'utf8');
    expect(text).not.toMatch(/(\.\.\/)+shared\/|`shared\/(spec|CONTRACT)/);
    const targets = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
    for (const target of targets) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#')) continue;
      const resolved = path.resolve(path.dirname(path.join(root, file)), target.split('#')[0]!);
      expect(resolved.startsWith(root), `${target} leaves the repository`).toBe(true);
      expect(existsSync(resolved), `${target} does not exist`).toBe(true);
    }
  });
});

describe('the embedded database folder', () => {
  // Each of these services keeps its PGlite database in `.data/<service>/pglite` by default, as `pnpm start` does.
  const defaults = {
    auth: authConfigSchema.parse({}).database.embedded_path,
    billing: billingConfigSchema.parse({}).database.embedded_path,
    'provider-registry': registryConfigSchema.parse({}).database.embedded_path,
  };

  it.each(Object.entries(defaults))('of %s is .data/<service>/pglite, as its README says', (service, embedded) => {
    expect(embedded).toBe(`.data/${service}/pglite`);
    const readme = readFileSync(path.join(root, 'services', service, 'README.md'), 'utf8');
    // Every data folder the README names for the database (a PGlite folder, or the old `-db` spelling).
    const mentioned = [...readme.matchAll(/\.data\/[\w./-]*?(?:pglite|-db)\b/g)].map((m) => m[0]);
    expect(mentioned.length, 'the README names the folder').toBeGreaterThan(0);
    expect(
      mentioned.every((m) => m === embedded),
      `${service} README: ${mentioned.join(', ')}`,
    ).toBe(true);
  });
});
