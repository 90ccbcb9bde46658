/**
 * `pnpm build`: compiles the programs `pnpm start` runs to JavaScript now (scripts/lib/build.ts). `pnpm start` does
 * so itself whenever a source changed; this is for checking a build or making one ahead.
 */
import { build, platformPrograms } from './lib/build.ts';
import { answerHelp, refuseArguments } from './lib/usage.ts';

answerHelp(`usage: pnpm build

Compiles the programs pnpm start runs (the services, the S3 store, the local chain, the gateway) from TypeScript to
JavaScript in each package's dist/, now. pnpm start does so itself whenever a source changed. Takes no arguments.`);
refuseArguments('pnpm build');

const r = await build(platformPrograms());
process.stdout.write(`compiled ${r.files} files (${r.written} changed) in ${r.ms} ms\n`);
