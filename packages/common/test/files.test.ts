import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createFileOnce } from '../src/files.ts';

describe('createFileOnce', () => {
  it('makes the file with its text and mode, and leaves an existing one as it is', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'create-once-'));
    const file = path.join(dir, 'key.pem');
    expect(createFileOnce(file, 'first', 0o600)).toBe(true);
    expect(createFileOnce(file, 'second', 0o600)).toBe(false);
    expect(readFileSync(file, 'utf8')).toBe('first');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['key.pem']);
  });

  it('leaves exactly one version when processes race for it, and none of them reads it empty', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'create-once-'));
    const file = path.join(dir, 'shared');
    const module = new URL('../src/files.ts', import.meta.url).pathname;
    // Each process, at the same instant, creates the file with a long text of its own, then reads what is there.
    const startAt = Date.now() + 1500;
    const script = `
      import { createFileOnce } from ${JSON.stringify(module)};
      import { readFileSync } from 'node:fs';
      while (Date.now() < ${startAt});
      const made = createFileOnce(${JSON.stringify(file)}, String(process.pid).repeat(20000));
      console.log(JSON.stringify({ made, read: readFileSync(${JSON.stringify(file)}, 'utf8') }));`;
    const runs = Array.from(
      { length: 6 },
      () =>
        new Promise<{ made: boolean; read: string }>((resolve, reject) => {
          const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script]);
          let out = '';
          child.stdout.on('data', (d) => {
            out += d;
          });
          child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`exit ${code}`))));
        }),
    );
    const results = await Promise.all(runs);
    expect(results.filter((r) => r.made)).toHaveLength(1);
    const whole = readFileSync(file, 'utf8');
    for (const r of results) expect(r.read).toBe(whole);
    expect(readdirSync(dir)).toEqual(['shared']);
  }, 30_000);
});
