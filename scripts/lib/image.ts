/**
 * What a service's image runs, shared by the Dockerfile's build stage (scripts/prepare-image.sh) and the tests: the
 * service compiled to JavaScript by the builder `pnpm start` uses (scripts/lib/build.ts: each package's `dist/`, with
 * source maps), started with plain `node` as `pnpm start` starts it, with the V8 flags of the package's `start` script
 * (storage's, node-flags.ts) and `--enable-source-maps`, from the service's folder.
 *
 *   serviceEntry('storage')  → services/storage/src/server.ts
 *   imageCommand('storage')  → node --initial-old-space-size=64 --max-semi-space-size=8 --enable-source-maps dist/src/server.js
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { build, compiledPath } from './build.ts';
import { repoRoot } from './platform.ts';

/** A package's `start` script: `node [V8 flags] --import tsx src/server.ts` (the program run from its source). */
const START_SCRIPT = /^node((?: --[\w-]+(?:=\S+)?)*) --import tsx src\/server\.ts$/;

/** The services an image can be built for: the folders under services/ with a src/server.ts. */
export function imageServices(): string[] {
  return readdirSync(path.join(repoRoot, 'services'))
    .filter((name) => existsSync(path.join(repoRoot, 'services', name, 'src/server.ts')))
    .sort();
}

/** The service's program, repository-relative. */
function serviceEntry(service: string): string {
  if (!imageServices().includes(service)) {
    throw new Error(`no service ${JSON.stringify(service)}: one of ${imageServices().join(', ')}`);
  }
  return `services/${service}/src/server.ts`;
}

/** The V8 flags of the package's `start` script (`--initial-old-space-size=64 ...`), or none. */
function serviceNodeFlags(service: string): string[] {
  const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'services', service, 'package.json'), 'utf8'));
  const start = pkg.scripts?.start as string | undefined;
  const m = start === undefined ? null : START_SCRIPT.exec(start);
  if (!m) throw new Error(`services/${service}: the start script must be 'node [flags] --import tsx src/server.ts'`);
  return m[1]!.trim().split(' ').filter(Boolean);
}

/** The command line the image runs, from the service's folder: its compiled program under plain node. */
export function imageCommand(service: string): string {
  const dir = path.join(repoRoot, 'services', service);
  const program = path
    .relative(dir, compiledPath(serviceEntry(service)))
    .split(path.sep)
    .join('/');
  return ['node', ...serviceNodeFlags(service), '--enable-source-maps', program].join(' ');
}

/** Compiles the service and what it imports into each package's `dist/` (a build record of the image's own). */
export async function buildServiceImage(service: string): Promise<{ files: number; written: number; ms: number }> {
  return build([serviceEntry(service)], path.join(repoRoot, 'dist', `image-${service}.json`));
}
