import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { imageCommand } from '../../../scripts/lib/image.ts';
import { STORAGE_NODE_FLAGS } from '../node-flags.ts';

const read = (file: string) => readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');

// pnpm start and the benchmark take the flags from STORAGE_NODE_FLAGS itself; the package's start script spells
// them out, and the image runs the compiled program with the start script's flags, so neither may drift from it.
describe('the V8 flags the service runs with', () => {
  it("are on the image's command line: the compiled program, with the start script's flags", () => {
    expect(imageCommand('storage')).toBe(
      ['node', ...STORAGE_NODE_FLAGS, '--enable-source-maps', 'dist/src/server.js'].join(' '),
    );
    const dockerfile = read('../../Dockerfile');
    const cmd = dockerfile.split('\n').find((l) => l.startsWith('CMD '));
    expect(JSON.parse(cmd!.slice(4))).toEqual(['/bin/sh', '-c', 'exec $(cat /app/start-command)']);
  });

  it("are in the package's start script", () => {
    const start: string = JSON.parse(read('package.json')).scripts.start;
    expect(start).toBe(['node', ...STORAGE_NODE_FLAGS, '--import', 'tsx', 'src/server.ts'].join(' '));
  });
});
