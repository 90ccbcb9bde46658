/**
 * Billing's domain is grouped by concept (docs/architecture.md, "Each service's rooms"): no folder of any service's
 * domain holds more than 12 files, and code outside a concept reaches it only through the concept's `index.ts`
 * (the kernel, `domain/context.ts` and `errors.ts`, imports the types it names from their own files: concept files
 * depend on it), and concepts depend downward only, in the order docs/architecture.md draws them. Read from the
 * sources' import declarations. And the domain writes no SQL: its queries are the repositories' (db/); the presenters
 * (wire/) import nothing of db/.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SERVICES = join(import.meta.dirname, '../..');
const SRC = join(import.meta.dirname, '../src');
const DOMAIN = join(SRC, 'domain');
const KERNEL = new Set([join(DOMAIN, 'context.ts'), join(SRC, 'errors.ts')]);

const tsFiles = (dir: string) =>
  readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name));

/** The concept folder a file is in (`sessions`), or null for the domain's top level and everything else. */
function conceptOf(file: string): string | null {
  const rel = relative(DOMAIN, file);
  const parts = rel.split('/');
  return !rel.startsWith('..') && parts.length === 2 ? parts[0]! : null;
}

/** Each relative import or re-export of the file: the resolved target and whether it names types only. */
function importsOf(file: string): { target: string; typeOnly: boolean }[] {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const out: { target: string; typeOnly: boolean }[] = [];
  for (const node of sf.statements) {
    if (!(ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) || !node.moduleSpecifier) continue;
    const spec = (node.moduleSpecifier as ts.StringLiteral).text;
    if (!spec.startsWith('.')) continue;
    let typeOnly: boolean;
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const named = clause?.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings : null;
      typeOnly =
        !!clause && (clause.isTypeOnly || (!clause.name && !!named && named.elements.every((e) => e.isTypeOnly)));
    } else {
      typeOnly = node.isTypeOnly;
    }
    out.push({ target: resolve(dirname(file), spec), typeOnly });
  }
  return out;
}

describe("billing's domain rooms", () => {
  it('no domain folder of any service holds more than 12 files', () => {
    const counts = new Map<string, number>();
    for (const service of readdirSync(SERVICES)) {
      const domain = join(SERVICES, service, 'src/domain');
      let files: string[];
      try {
        files = tsFiles(domain);
      } catch {
        continue;
      }
      for (const f of files) counts.set(dirname(f), (counts.get(dirname(f)) ?? 0) + 1);
    }
    expect(counts.size).toBeGreaterThan(4);
    const crowded = [...counts].filter(([, n]) => n > 12).map(([dir, n]) => `${relative(SERVICES, dir)}: ${n}`);
    expect(crowded).toEqual([]);
  });

  it('outside callers reach a concept through its index.ts; the kernel imports types only', () => {
    const concepts = new Set(
      tsFiles(DOMAIN)
        .map(conceptOf)
        .filter((c): c is string => c !== null),
    );
    expect([...concepts].sort()).toEqual([
      'chain',
      'jobs',
      'leases',
      'ledger',
      'pricing',
      'reach',
      'reserves',
      'sessions',
      'storage',
      'wallets',
      'workloads',
    ]);
    const bypasses: string[] = [];
    for (const file of tsFiles(SRC)) {
      for (const { target, typeOnly } of importsOf(file)) {
        const concept = conceptOf(target);
        if (!concept || conceptOf(file) === concept || target.endsWith('/index.ts')) continue;
        if (KERNEL.has(file) && typeOnly) continue;
        bypasses.push(`${relative(SRC, file)} -> ${relative(SRC, target)}`);
      }
    }
    expect(bypasses).toEqual([]);
  });

  it('holds no SQL: queries live in db/*-repository.ts, which the domain calls', () => {
    // A query builder's statement or a raw SQL template, anywhere in domain/ (a transaction it opens is not SQL).
    const QUERY = /\.(selectFrom|insertInto|updateTable|deleteFrom|mergeInto)\(|\bsql\s*(<[^`;]*>)?\s*`|\bsql\.\w+\(/;
    const queries = tsFiles(DOMAIN).flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .map((line, i) => ({ line, at: `${relative(SRC, file)}:${i + 1}` }))
        .filter(({ line }) => QUERY.test(line) && !/^\s*(\*|\/\/)/.test(line))
        .map(({ at }) => at),
    );
    expect(queries).toEqual([]);
  });

  it("presenters (wire/) take the domain's values: nothing of db/ is imported there", () => {
    const DB = join(SRC, 'db');
    const rows = tsFiles(join(SRC, 'wire')).flatMap((file) =>
      importsOf(file)
        .filter(({ target }) => target.startsWith(`${DB}/`))
        .map(({ target }) => `${relative(SRC, file)} -> ${relative(SRC, target)}`),
    );
    expect(rows).toEqual([]);
  });

  it('one repository writes rental_sessions: db/session-repository.ts', () => {
    const WRITE =
      /\.(insertInto|updateTable|deleteFrom|mergeInto)\(\s*'rental_sessions'|\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+rental_sessions\b/i;
    const writers = tsFiles(SRC)
      .filter((file) => !file.includes('/db/migrations/') && WRITE.test(readFileSync(file, 'utf8')))
      .map((file) => relative(SRC, file));
    expect(writers).toEqual(['db/session-repository.ts']);
  });

  it("the session's time is worked out in one place: domain/sessions/clock.ts", () => {
    // The settings and the formula that make a session's deadlines (grace, clock skew, the time funds pay for), and
    // the columns that hold them, are used by the clock alone (the presenters and routes only show them).
    const TIME =
      /\b(gracePeriodMs|msPaidFor|startSessionClock)\b|ctx\.sessions\.maxClockSkewMs|\b(billed_from|cap_ends_at):/;
    const outside = tsFiles(join(SRC, 'domain'))
      .filter((file) => !file.endsWith('/domain/sessions/clock.ts') && !file.includes('/domain/pricing/'))
      .filter((file) => !file.endsWith('/domain/context.ts'))
      .flatMap((file) =>
        readFileSync(file, 'utf8')
          .split('\n')
          .some((line) => TIME.test(line) && !/^\s*(\*|\/\/)/.test(line))
          ? [relative(SRC, file)]
          : [],
      );
    // The values a new session row starts with (start.ts, from the clock's `capDeadline`), and the times a usage
    // report (usage-updates.ts) or a storage report (charges.ts) may bear, are not the session's clock.
    expect(outside).toEqual([
      'domain/sessions/start.ts',
      'domain/sessions/usage-updates.ts',
      'domain/storage/charges.ts',
    ]);
    // Workloads translate the daemon's reports: they write no session row and read no clock setting of their own.
    const workloadImports = tsFiles(join(DOMAIN, 'workloads')).flatMap((file) =>
      importsOf(file)
        .filter(({ target }) => target.endsWith('/db/session-repository.ts'))
        .map(({ target }) => `${relative(SRC, file)} -> ${relative(SRC, target)}`),
    );
    expect(workloadImports).toEqual([]);
  });

  it('concepts depend downward only: each imports only concepts drawn below it', () => {
    // Top to bottom, as docs/architecture.md draws them; concepts on one rank do not import each other.
    const ranks = [
      ['jobs'],
      ['reach', 'workloads'],
      ['sessions'],
      ['leases'],
      ['pricing'],
      ['storage'],
      ['wallets'],
      ['reserves'],
      ['ledger', 'chain'],
    ];
    const rank = new Map(ranks.flatMap((names, i) => names.map((n) => [n, i] as const)));
    const upward: string[] = [];
    for (const file of tsFiles(DOMAIN)) {
      const from = conceptOf(file);
      if (!from) continue;
      expect(rank.has(from), from).toBe(true);
      for (const { target } of importsOf(file)) {
        const to = conceptOf(target);
        if (!to || to === from) continue;
        if ((rank.get(to) ?? -1) <= (rank.get(from) ?? -1))
          upward.push(`${relative(SRC, file)} -> ${relative(SRC, target)}`);
      }
    }
    expect(upward).toEqual([]);
  });
});
