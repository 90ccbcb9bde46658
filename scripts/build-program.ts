/**
 * Compiles programs of the repository (repository-relative entries) as `pnpm start` compiles its own
 * (scripts/lib/build.ts: each package's `dist/`, source maps beside), with a build record of their own, for images
 * that run a program other than a service (tools/solana-localnet/Dockerfile: the chain set-up).
 *   node --import tsx scripts/build-program.ts tools/solana-localnet/src/setup.ts
 */
import path from 'node:path';
import { build, compiledPath } from './lib/build.ts';
import { repoRoot } from './lib/platform.ts';
import { answerHelp } from './lib/usage.ts';

answerHelp(`usage: node --import tsx scripts/build-program.ts <program.ts>...

Compiles the named programs (repository-relative .ts files) and what they import to JavaScript in their packages'
dist/, as pnpm start compiles its own, with a build record of their own (dist/program-build-info.json).`);

const entries = process.argv.slice(2);
if (entries.length === 0) {
  process.stderr.write('build-program: name the programs to compile (repository-relative .ts files)\n');
  process.exit(1);
}
const r = await build(entries, path.join(repoRoot, 'dist', 'program-build-info.json'));
const outputs = entries.map((e) => path.relative(repoRoot, compiledPath(e))).join(', ');
process.stdout.write(`compiled ${r.files} files in ${r.ms} ms: ${outputs}\n`);
