/**
 * `pnpm build`: compiles the programs `pnpm start` runs to JavaScript now (scripts/lib/build.ts). `pnpm start` does
 * so itself whenever a source changed; this is for checking a build or making one ahead.
 */
import { build, platformPrograms } from './lib/build.ts';

const r = await build(platformPrograms());
process.stdout.write(`compiled ${r.files} files (${r.written} changed) in ${r.ms} ms\n`);
