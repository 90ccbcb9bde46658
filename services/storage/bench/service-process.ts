/** Processes the storage benchmarks start and watch: the service (as `pnpm start` runs it) and reference servers. */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { STORAGE_NODE_FLAGS } from '../node-flags.ts';

export const serviceDir = fileURLToPath(new URL('..', import.meta.url));
/**
 * The service compiled as `pnpm start` runs it: the builder (scripts/lib/build.ts) puts each source of a package in
 * the package's `dist/` (`src/server.ts` → `dist/src/server.js`). `pnpm bench storage` (scripts/bench.sh) builds it
 * first.
 */
const COMPILED_SERVER = path.join(serviceDir, 'dist/src/server.js');

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as { port: number };
  await new Promise((r) => srv.close(r));
  return port;
}

/** CPU seconds (user + system) a process has used so far; Linux clock ticks are 1/100 s. */
export function cpuSeconds(pid: number): number {
  if (pid <= 0) return 0;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** A process's resident memory now (`rss`) and at its peak so far (`peak`), in KiB, from /proc. */
export function memoryKiB(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]);
  return { rss: field('VmRSS'), peak: field('VmHWM') };
}

/** The test environment's s3rver process (scripts/test-env.sh writes its pid). */
export function storePid(): number {
  return Number(readFileSync(`${process.env.TEST_ENV_DIR}/s3.pid`, 'utf8').trim() || 0);
}

/**
 * Starts a Node process under the service's V8 flags and waits for its /health. The service (`src/server.ts`) runs
 * as `pnpm start` runs it: compiled (built by `pnpm bench` before the benchmark starts), with source maps; a bench
 * script runs from source through tsx.
 */
export async function startHttpProcess(
  script: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  let program = ['--import', 'tsx', script];
  if (script === 'src/server.ts') {
    if (!existsSync(COMPILED_SERVER))
      throw new Error(`${COMPILED_SERVER} is missing: run the benchmark with pnpm bench`);
    program = ['--enable-source-maps', COMPILED_SERVER];
  }
  const child = spawn(process.execPath, [...STORAGE_NODE_FLAGS, ...program], {
    cwd: serviceDir,
    env: { ...process.env, ...env, PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 150; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) return { child, url };
    } catch {}
    await new Promise((r) => setTimeout(r, 200));
  }
  child.kill();
  throw new Error(`${script} did not start`);
}
