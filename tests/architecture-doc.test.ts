/**
 * docs/architecture.md's inventories hold against the code: the services (the folders of `services/`), the tools (the
 * folders of `tools/`), the processes `pnpm start` runs (the list `scripts/start.ts` starts, read from its source) and
 * the kinds of message the services publish (billing's `BillingEvent`, read with the type checker, so the kinds it
 * takes from `@gpu/common` count too; the registry's kinds, the string constants of its `domain/status-events.ts`).
 * Each inventory is the first table under its heading, one row per name, the name the first code span of the row's
 * first cell. A name in the code that the document lacks, or one the document lists that the code does not have,
 * fails with the name.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const DOC = 'docs/architecture.md';
const doc = readFileSync(path.join(root, DOC), 'utf8');

/** The names an inventory of the document lists: the first code span of each row of the first table under `heading`. */
function inventory(heading: string): string[] {
  const lines = doc.split('\n');
  const start = lines.findIndex((l) => /^#{2,6} /.test(l) && l.replace(/^#+ /, '').trim() === heading);
  expect(start, `${DOC} has a section "${heading}"`).toBeGreaterThan(-1);
  const level = lines[start]!.match(/^#+/)![0].length;
  const table: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const h = line.match(/^(#+) /);
    if (h && h[1]!.length <= level) break;
    if (line.startsWith('|')) table.push(line);
    else if (table.length > 0) break;
  }
  expect(table.length, `${DOC}, "${heading}": a table with a header and rows`).toBeGreaterThan(2);
  return table.slice(2).map((row) => {
    const cell = row.split('|')[1] ?? '';
    const name = cell.match(/`([^`]+)`/)?.[1];
    expect(name, `${DOC}, "${heading}": a name in the first cell of ${row}`).toBeDefined();
    return name!;
  });
}

/** Fails naming what one side has and the other lacks (and any name the document lists twice). */
function expectSame(what: string, documented: string[], inCode: string[]): void {
  expect(inCode.length, `the code has ${what}`).toBeGreaterThan(0);
  const twice = documented.filter((name, i) => documented.indexOf(name) !== i);
  expect(twice, `${what} that ${DOC} lists twice`).toEqual([]);
  const differences = {
    [`in the code, not in ${DOC}`]: inCode.filter((name) => !documented.includes(name)),
    [`in ${DOC}, not in the code`]: documented.filter((name) => !inCode.includes(name)),
  };
  expect(differences, `${what}: ${DOC} and the code differ`).toEqual({
    [`in the code, not in ${DOC}`]: [],
    [`in ${DOC}, not in the code`]: [],
  });
}

/** The folders of a directory of the repository that hold a package (a package.json). */
function packagesIn(dir: string): string[] {
  return readdirSync(path.join(root, dir), { withFileTypes: true })
    .filter((e) => e.isDirectory() && readdirSync(path.join(root, dir, e.name)).includes('package.json'))
    .map((e) => `${dir}/${e.name}`);
}

/**
 * The names of the processes `pnpm start` starts: the array `started` in scripts/start.ts lists the arrays and
 * processes it starts (`[...dependencies, ...services, ...gatewayTelemetry, gateway]`); each is a variable of the
 * script, whose object literals name their process (`name: 's3'`). Both alternatives of a choice count (the gateway
 * is nginx or Node; the telemetry receiver runs with nginx only).
 */
function startedProcesses(): string[] {
  const file = path.join(root, 'scripts/start.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const variables = new Map<string, ts.Expression>();
  const visit = (node: ts.Node) => {
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer)
      variables.set(node.name.text, node.initializer);
    ts.forEachChild(node, visit);
  };
  visit(source);
  const started = variables.get('started');
  expect(started && ts.isArrayLiteralExpression(started), 'scripts/start.ts starts the array `started`').toBe(true);
  const names = new Set<string>();
  for (const element of (started as ts.ArrayLiteralExpression).elements) {
    const ref = ts.isSpreadElement(element) ? element.expression : element;
    expect(ts.isIdentifier(ref), `an element of \`started\` names a variable: ${ref.getText(source)}`).toBe(true);
    const init = variables.get((ref as ts.Identifier).text);
    expect(init, `scripts/start.ts defines ${ref.getText(source)}`).toBeDefined();
    const found: string[] = [];
    const collect = (node: ts.Node) => {
      if (ts.isObjectLiteralExpression(node)) {
        for (const p of node.properties) {
          if (ts.isPropertyAssignment(p) && p.name.getText(source) === 'name' && ts.isStringLiteral(p.initializer))
            found.push(p.initializer.text);
        }
      }
      ts.forEachChild(node, collect);
    };
    collect(init!);
    expect(found.length, `${ref.getText(source)} names its processes`).toBeGreaterThan(0);
    for (const name of found) names.add(name);
  }
  return [...names];
}

/** The string literal values of a type (a literal, or a union of them). */
function literals(type: ts.Type): string[] {
  const parts = type.isUnion() ? type.types : [type];
  return parts.map((t) => {
    expect(t.isStringLiteral(), 'a kind is a string literal type').toBe(true);
    return (t as ts.StringLiteralType).value;
  });
}

/** Every `kind` of billing's `BillingEvent` union (services/billing/src/domain/events.ts), as the compiler sees it. */
function billingKinds(): string[] {
  const file = path.join(root, 'services/billing/src/domain/events.ts');
  const config = ts.getParsedCommandLineOfConfigFile(path.join(root, 'services/billing/tsconfig.json'), undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  });
  const program = ts.createProgram({ rootNames: [file], options: config!.options });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file)!;
  const alias = source.statements.find(
    (s): s is ts.TypeAliasDeclaration => ts.isTypeAliasDeclaration(s) && s.name.text === 'BillingEvent',
  );
  expect(alias, 'services/billing/src/domain/events.ts declares BillingEvent').toBeDefined();
  const union = checker.getTypeAtLocation(alias!.name);
  const members = union.isUnion() ? union.types : [union];
  return members.flatMap((member) => {
    const kind = checker.getPropertyOfType(member, 'kind');
    expect(kind, `every BillingEvent has a kind: ${checker.typeToString(member)}`).toBeDefined();
    return literals(checker.getTypeOfSymbolAtLocation(kind!, alias!));
  });
}

/** The registry's kinds: the string constants its status-events module spells (`provider.status_changed`, ...). */
function registryKinds(): string[] {
  const file = path.join(root, 'services/provider-registry/src/domain/status-events.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  return source.statements.flatMap((s) =>
    ts.isVariableStatement(s)
      ? s.declarationList.declarations.flatMap((d) =>
          d.initializer && ts.isStringLiteral(d.initializer) ? [d.initializer.text] : [],
        )
      : [],
  );
}

describe(`${DOC}'s inventories`, () => {
  it('list every service, and nothing else', () => {
    expectSame('services', inventory('What each service owns'), packagesIn('services'));
  });

  it('list every tool, and nothing else', () => {
    expectSame('tools', inventory('The tools'), packagesIn('tools'));
  });

  it('list every process `pnpm start` runs, and nothing else', () => {
    expectSame('processes of pnpm start', inventory('What `pnpm start` runs'), startedProcesses());
  });

  it('list every kind of message the services publish, and nothing else', () => {
    const kinds = [...billingKinds(), ...registryKinds()];
    expect(kinds).toContain('session.started');
    expect(kinds).toContain('provider.status_changed');
    expectSame('message kinds', inventory('Message kinds'), [...new Set(kinds)]);
  });
});
