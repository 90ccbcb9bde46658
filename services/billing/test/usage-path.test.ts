/**
 * A usage report's path reads in one direction (docs/architecture.md, "A usage report's path"): followed from the
 * HTTP route to the ledger entry it causes (a hold top-up), it visits at most 12 files of billing's domain and
 * repositories, and never comes back to a file it has left: every file on the path is entered from one file only,
 * and never from a file it called itself.
 *
 * Measured, not declared: every exported function of `src/domain` and `src/db` is wrapped (vi.doMock before the app
 * is imported) to record which file called which as a real report is applied against PostgreSQL. Calls inside a file
 * are not stops. `money.ts` (exact decimal arithmetic: the vocabulary every file speaks, as decimal.js is) is not
 * counted as a stop, but it is recorded.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it, vi } from 'vitest';

const SRC = join(import.meta.dirname, '../src');
const VOCABULARY = new Set(['domain/ledger/money.ts']);
/** The function whose call writes the ledger's transfer rows. */
const LEDGER_ENTRY = { file: 'db/ledger-repository.ts', fn: 'postLedgerRows' };

interface Call {
  caller: string;
  file: string;
  fn: string;
}
const calls: Call[] = [];
let recording = false;
const stack = new AsyncLocalStorage<string>();

/** A constructor (a class, or decimal.js's `Dec`) keeps its identity: only plain functions are wrapped. */
const isConstructor = (f: (...args: unknown[]) => unknown) =>
  /^class\b/.test(Function.prototype.toString.call(f)) ||
  Object.keys(f).length > 0 ||
  (f.prototype !== undefined && Object.getOwnPropertyNames(f.prototype).length > 1);

/** The module's exports with every plain function recording its calls from other files. */
function traced(mod: Record<string, unknown>, file: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(mod)) {
    if (typeof value !== 'function' || isConstructor(value as (...args: unknown[]) => unknown)) {
      out[name] = value;
      continue;
    }
    const fn = value as (...args: unknown[]) => unknown;
    out[name] = function (this: unknown, ...args: unknown[]) {
      const caller = stack.getStore() ?? '(route)';
      if (recording && caller !== file) calls.push({ caller, file, fn: name });
      return stack.run(file, () => fn.apply(this, args));
    };
  }
  return out;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && e.name !== 'index.ts')
    .map((e) => relative(SRC, join(e.parentPath, e.name)))
    .filter((f) => !f.startsWith('db/migrations/') && f !== 'db/schema.ts');
}

for (const file of [...sources(join(SRC, 'domain')), ...sources(join(SRC, 'db'))]) {
  vi.doMock(join(SRC, file), async (importOriginal) => traced(await importOriginal(), file));
}
const { useBillingHarness } = await import('./support/setup.ts');
const { manualClock, parties, start, startBody, H100_X1 } = await import('./support/sessions.ts');

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

/** The path's files in the order they were first entered, each with the files that called it. */
function pathOf(window: Call[]) {
  const callers = new Map<string, Set<string>>();
  for (const c of window) {
    if (VOCABULARY.has(c.file)) continue;
    const set = callers.get(c.file) ?? new Set();
    set.add(c.caller);
    callers.set(c.file, set);
  }
  return callers;
}

describe("a usage report's path", () => {
  it('reaches its ledger entry through at most 12 files, never returning to one it left', async () => {
    const p = await parties(h, '20');
    const started = await start(h, startBody(p, H100_X1));
    expect(started.statusCode, started.body).toBe(201);
    const session = started.json().session.id as string;
    // 55 of the hour held at the start are billed: the hold is topped up, which writes the ledger entry.
    clock.advance(55 * 60_000);

    recording = true;
    const res = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-update',
      payload: {
        session_id: session,
        message_id: 'path-1',
        timestamp: clock.now().toISOString(),
        gpu_utilization: 90,
        power_draw_w: 300,
      },
    });
    recording = false;
    expect(res.statusCode).toBe(201);
    expect(res.json().usage.billed_minutes).toBe(55);

    const entry = calls.findIndex((c) => c.file === LEDGER_ENTRY.file && c.fn === LEDGER_ENTRY.fn);
    expect(entry, 'the report wrote a ledger entry').toBeGreaterThan(0);
    const window = calls.slice(0, entry + 1);
    const path = pathOf(window);

    // The path as the architecture document draws it.
    const doc = readFileSync(join(import.meta.dirname, '../../../docs/architecture.md'), 'utf8');
    const drawn = doc.match(/<!-- usage-path -->\n([\s\S]*?)<!-- \/usage-path -->/)?.[1] ?? '';
    const documented = [...drawn.matchAll(/`src\/([^`]+\.ts)`/g)].map((m) => m[1]!);
    expect([...path.keys()]).toEqual(documented);

    expect(path.size).toBeLessThanOrEqual(12);
    for (const [file, from] of path) {
      expect([...from], `${file} is entered from one file only`).toHaveLength(1);
    }
    // Never back up: no file calls a file that was entered before it (its caller or an ancestor).
    const order = [...path.keys()];
    for (const c of window) {
      if (c.caller === '(route)' || VOCABULARY.has(c.file)) continue;
      expect(order.indexOf(c.file), `${c.caller} calls back up to ${c.file}`).toBeGreaterThan(order.indexOf(c.caller));
    }
  });
});
