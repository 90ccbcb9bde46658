/**
 * Compiles one service as its image runs it (scripts/lib/image.ts) and writes the command line the image starts it
 * with to `start-command` at the repository's root. The Dockerfile's build stage runs it through
 * scripts/prepare-image.sh.
 *   node --import tsx scripts/build-service.ts storage
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { buildServiceImage, imageCommand } from './lib/image.ts';
import { repoRoot } from './lib/platform.ts';
import { answerHelp } from './lib/usage.ts';

answerHelp(`usage: node --import tsx scripts/build-service.ts <service>

Compiles one service (a folder under services/) as its image runs it, and writes the command line the image starts
it with to start-command at the repository's root (the Dockerfile's build stage, through scripts/prepare-image.sh).`);

const service = process.argv[2] ?? '';
try {
  const command = imageCommand(service);
  const r = await buildServiceImage(service);
  writeFileSync(path.join(repoRoot, 'start-command'), `${command}\n`);
  process.stdout.write(`${service}: compiled ${r.files} files in ${r.ms} ms; the image runs: ${command}\n`);
} catch (err) {
  process.stderr.write(`build-service: ${(err as Error).message}\n`);
  process.exit(1);
}
