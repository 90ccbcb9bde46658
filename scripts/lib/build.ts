/**
 * Compiles the programs `pnpm start` runs (the services, the S3 store, the Solana localnet) from TypeScript to
 * JavaScript once, so that they start with plain `node` rather than transpiling every file at each start under tsx
 * (about 2 s of CPU per process, six processes on two cores).
 *
 * Each source file becomes one JavaScript file (esbuild's transform, as tsx does at run time, with this repository's
 * tsconfig) under `dist/` in its own package: `services/auth/src/server.ts` → `services/auth/dist/src/server.js`. A
 * compiled file so sits beside its package's `node_modules`, imports its packages by the same names and finds them
 * where the source does, and `import.meta.url` names a file in the same package; a relative import (`./app.ts`)
 * becomes `./app.js` and a workspace package (`@gpu/common`) the compiled file of the module its `exports` name.
 * Only the files the programs import are compiled; their list, with sizes and modification times, is kept in
 * `dist/build-info.json`, and a build is stale (`isBuildCurrent`) when any of them, or any output, changed.
 *
 *   pnpm build                                   compile platformPrograms() now
 *   await ensureBuilt(platformPrograms())        compile when sources changed (what `pnpm start` does)
 *   compiledPath('services/auth/src/server.ts')  → <repo>/services/auth/dist/src/server.js
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import type { OnResolveArgs, PluginBuild } from 'esbuild';
import { repoRoot as root } from './platform.ts';

/** The repository's folder, without a trailing separator. */
const repoRoot = path.resolve(root);

/** Where a checkout's build records what it compiled: without it, everything is compiled again (as after a clone). */
export const buildInfoFile = (checkout: string = repoRoot) => path.join(checkout, 'dist', 'build-info.json');
/** `pnpm start`'s build record (a test names its own, so as not to touch this one). */
const INFO_FILE = buildInfoFile();
/** Files whose change alters every output: the compiler settings and this builder. */
const BUILD_INPUTS = ['tsconfig.base.json', 'scripts/lib/build.ts'];
const builtins = new Set(builtinModules);

interface BuildInfo {
  entries: string[];
  /**
   * Repository-relative path → `size:mtimeMs`, for every source compiled, every output, BUILD_INPUTS and the
   * package.json of each package compiled from (its `exports` decide what a package import means).
   */
  files: Record<string, string>;
}

/** The module `pnpm start` preloads into every program it runs: its end of the supervisor's lifeline. */
export const LIFELINE = 'scripts/lib/lifeline.ts';

/**
 * The programs `pnpm start` runs (repository-relative sources): the S3 store, the localnet, every service, the
 * gateway; and the lifeline it preloads into each.
 */
export function platformPrograms(): string[] {
  const services = readdirSync(path.join(repoRoot, 'services'))
    .map((name) => `services/${name}/src/server.ts`)
    .filter((file) => existsSync(path.join(repoRoot, file)));
  return [
    LIFELINE,
    'scripts/dev/s3-server.ts',
    'scripts/dev/mail-server.ts',
    'tools/solana-localnet/src/server.ts',
    ...services,
    'tools/gateway/src/server.ts',
    'tools/gateway/src/telemetry-server.ts',
  ];
}

/** The folder holding a file's package.json: the package it belongs to. */
function packageRoot(file: string): string {
  for (let dir = path.dirname(file); dir.startsWith(repoRoot) && dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
  }
  throw new Error(`${file} is not inside a package of ${repoRoot}`);
}

/** Where a source file of the repository compiles to: `<package>/dist/<path in the package>.js`. */
export function compiledPath(source: string): string {
  const abs = path.resolve(repoRoot, source);
  const pkg = packageRoot(abs);
  return path.join(pkg, 'dist', path.relative(pkg, abs)).replace(/\.[cm]?ts$/, '.js');
}

const isWorkspaceSource = (file: string) =>
  file.startsWith(repoRoot) && !file.includes(`${path.sep}node_modules${path.sep}`) && /\.[cm]?ts$/.test(file);

const isBuiltin = (specifier: string) => builtins.has(specifier) || specifier.startsWith('node:');

/** Resolves an import as esbuild does without the plugin (marked `inner`, which the plugin lets through). */
const resolveUnhooked = (b: PluginBuild, args: OnResolveArgs) =>
  b.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, importer: args.importer, pluginData: 'inner' });

const stamp = (file: string) => {
  const s = statSync(file);
  return `${s.size}:${s.mtimeMs}`;
};

/** True when `dist/` holds a build of these entries and no source, output or build input changed since. */
export function isBuildCurrent(entries: readonly string[], infoFile = INFO_FILE): boolean {
  let info: BuildInfo;
  try {
    info = JSON.parse(readFileSync(infoFile, 'utf8')) as BuildInfo;
  } catch {
    return false;
  }
  if (info.entries.join('\n') !== [...entries].sort().join('\n')) return false;
  for (const [file, recorded] of Object.entries(info.files)) {
    try {
      if (stamp(path.join(repoRoot, file)) !== recorded) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Compiles the entries (repository-relative source files) and every workspace source file they import, writes
 * `dist/build-info.json` and returns what it did. An output whose content is unchanged is left alone; a changed one
 * is written to a temporary file and renamed over the old, so a process starting meanwhile reads a whole file.
 */
export async function build(
  entries: readonly string[],
  infoFile = INFO_FILE,
): Promise<{ files: number; written: number; ms: number }> {
  const started = performance.now();
  const esbuild = await import('esbuild');
  const sorted = [...entries].sort();

  // Pass 1: the workspace files the entries import, found by bundling them (in memory) with packages left out.
  const graph = await esbuild.build({
    entryPoints: sorted.map((e) => path.join(repoRoot, e)),
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    outdir: path.join(repoRoot, 'dist', '.graph'),
    logLevel: 'silent',
    plugins: [
      {
        name: 'workspace-only',
        setup(b) {
          b.onResolve({ filter: /^[^./]/ }, async (args) => {
            if (args.pluginData === 'inner') return undefined;
            if (isBuiltin(args.path)) return { external: true };
            const r = await resolveUnhooked(b, args);
            if (r.errors.length > 0) return { errors: r.errors };
            return isWorkspaceSource(r.path) ? { path: r.path } : { external: true };
          });
        },
      },
    ],
  });
  const sources = Object.keys(graph.metafile.inputs)
    .map((f) => path.resolve(repoRoot, f))
    .filter(isWorkspaceSource);

  // Pass 2: each of those files on its own, with its imports rewritten to the compiled files.
  const result = await esbuild.build({
    entryPoints: sources.map((f) => ({ in: f, out: path.relative(repoRoot, compiledPath(f)).replace(/\.js$/, '') })),
    outdir: repoRoot,
    bundle: true,
    write: false,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'linked',
    logLevel: 'silent',
    plugins: [
      {
        name: 'compiled-imports',
        setup(b) {
          b.onResolve({ filter: /.*/ }, async (args) => {
            if (args.kind === 'entry-point' || args.pluginData === 'inner') return undefined;
            if (isBuiltin(args.path)) return { path: args.path, external: true };
            const r = await resolveUnhooked(b, args);
            if (r.errors.length > 0) return { errors: r.errors };
            // A package keeps its name: the compiled file resolves it from the same package folder as the source.
            if (!isWorkspaceSource(r.path)) return { path: args.path, external: true };
            let rel = path.relative(path.dirname(compiledPath(args.importer)), compiledPath(r.path));
            if (!rel.startsWith('.')) rel = `./${rel}`;
            return { path: rel.split(path.sep).join('/'), external: true };
          });
        },
      },
    ],
  });

  let written = 0;
  const files: Record<string, string> = {};
  for (const out of result.outputFiles) {
    const current = existsSync(out.path) ? readFileSync(out.path) : undefined;
    if (!current?.equals(out.contents)) {
      mkdirSync(path.dirname(out.path), { recursive: true });
      const tmp = `${out.path}.${process.pid}.tmp`;
      writeFileSync(tmp, out.contents);
      renameSync(tmp, out.path);
      written++;
    }
    files[path.relative(repoRoot, out.path)] = stamp(out.path);
  }
  const manifests = new Set(sources.map((f) => path.join(packageRoot(f), 'package.json')));
  for (const f of [...sources, ...manifests, ...BUILD_INPUTS.map((i) => path.join(repoRoot, i))])
    files[path.relative(repoRoot, f)] = stamp(f);
  mkdirSync(path.dirname(infoFile), { recursive: true });
  writeFileSync(infoFile, `${JSON.stringify({ entries: sorted, files } satisfies BuildInfo, null, 1)}\n`);
  return { files: sources.length, written, ms: Math.round(performance.now() - started) };
}

/** Builds the entries when the build is not current; says what it did (undefined when there was nothing to do). */
export async function ensureBuilt(entries: readonly string[], infoFile = INFO_FILE): Promise<string | undefined> {
  if (isBuildCurrent(entries, infoFile)) return undefined;
  const r = await build(entries, infoFile);
  return `compiled ${r.files} files (${r.written} changed) in ${r.ms} ms`;
}
