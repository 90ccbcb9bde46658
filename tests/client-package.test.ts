/**
 * The typed client as people install it: `pnpm --filter @gpu/client build` compiles it to JavaScript with types, and
 * `pnpm pack` makes a package that works in a fresh folder outside the monorepo (installed with npm from the tarball,
 * its one dependency from the registry): a program imports it and registers a user at a real auth service, and
 * TypeScript checks a program against its types.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testConfig, uniqueEmail, useAuth } from '../services/auth/test/helpers.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const auth = useAuth(testConfig());
const folder = mkdtempSync(path.join(tmpdir(), 'client-package-'));
let authUrl = '';

beforeAll(async () => {
  authUrl = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  await run('pnpm', ['--filter', '@gpu/client', 'build'], { cwd: root });
  await run('pnpm', ['pack', '--pack-destination', folder], { cwd: path.join(root, 'packages/client') });
  const tarball = readdirSync(folder).find((f) => f.endsWith('.tgz'))!;
  writeFileSync(
    path.join(folder, 'package.json'),
    JSON.stringify({ name: 'a-program', private: true, type: 'module' }),
  );
  await run('npm', ['install', `./${tarball}`, '--no-audit', '--no-fund', '--loglevel=error'], { cwd: folder });
}, 180_000);
afterAll(() => rmSync(folder, { recursive: true, force: true }));

describe('the client package', () => {
  it('works in a fresh folder outside the monorepo: a program registers a user with it', async () => {
    const email = uniqueEmail('package');
    writeFileSync(
      path.join(folder, 'register.mjs'),
      `import { authClient, unwrap } from '@gpu/client';
const auth = authClient({ baseUrl: process.argv[2] });
const answer = unwrap(await auth.POST('/api/v1/auth/register', {
  body: { email: process.argv[3], password: 'a long passphrase of a program' },
}));
console.log(JSON.stringify(answer.user));`,
    );
    const { stdout } = await run(process.execPath, ['register.mjs', authUrl, email], { cwd: folder });
    expect(JSON.parse(stdout)).toMatchObject({ email, roles: ['renter'] });
  });

  it('carries its types: TypeScript accepts a correct program and names the mistake in a wrong one', async () => {
    const tsc = path.join(root, 'node_modules/typescript/bin/tsc');
    const check = (file: string) =>
      run(
        process.execPath,
        [
          tsc,
          '--noEmit',
          '--strict',
          '--skipLibCheck',
          '--module',
          'nodenext',
          '--moduleResolution',
          'nodenext',
          '--target',
          'es2023',
          '--typeRoots',
          path.join(root, 'node_modules/@types'),
          file,
        ],
        { cwd: folder },
      ).then(
        () => '',
        (err: { stdout?: string }) => err.stdout ?? 'failed',
      );
    writeFileSync(
      path.join(folder, 'good.mts'),
      `import { registryClient, unwrap } from '@gpu/client';
const offers = unwrap(await registryClient({ baseUrl: 'http://127.0.0.1:8080' }).GET('/offers', { params: { query: { gpu_model: 'H100' } } }));
const price: string = offers[0]?.price_per_gpu_hour ?? '0';
console.log(price);`,
    );
    // A price is a decimal string, never a number: the package's types say so.
    writeFileSync(
      path.join(folder, 'bad.mts'),
      `import { registryClient, unwrap } from '@gpu/client';
const offers = unwrap(await registryClient({ baseUrl: 'http://127.0.0.1:8080' }).GET('/offers', {}));
const price: number = offers[0]!.price_per_gpu_hour;
console.log(price);`,
    );
    expect(await check('good.mts')).toBe('');
    expect(await check('bad.mts')).toMatch(
      /bad\.mts\(3,7\): error TS2322: Type 'string' is not assignable to type 'number'/,
    );
  });
});
