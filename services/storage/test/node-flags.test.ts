import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { STORAGE_NODE_FLAGS } from '../node-flags.ts';

const read = (file: string) => readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');

// pnpm start and the benchmark take the flags from STORAGE_NODE_FLAGS itself; these two ways of starting the
// service spell them out, so they must not drift from it.
describe('the V8 flags the service runs with', () => {
  it('are on the Dockerfile command line', () => {
    const cmd = read('Dockerfile')
      .split('\n')
      .find((l) => l.startsWith('CMD '));
    expect(JSON.parse(cmd!.slice(4))).toEqual(['node', ...STORAGE_NODE_FLAGS, '--import', 'tsx', 'src/server.ts']);
  });

  it("are in the package's start script", () => {
    const start: string = JSON.parse(read('package.json')).scripts.start;
    expect(start).toBe(['node', ...STORAGE_NODE_FLAGS, '--import', 'tsx', 'src/server.ts'].join(' '));
  });
});
