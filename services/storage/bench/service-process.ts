/** Processes the storage benchmarks start and watch: the service (as `pnpm start` runs it) and reference servers. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { STORAGE_NODE_FLAGS } from '../node-flags.ts';

export const serviceDir = fileURLToPath(new URL('..', import.meta.url));

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

/** The test environment's s3rver process (scripts/test-env.sh writes its pid). */
export function storePid(): number {
  return Number(readFileSync(`${process.env.TEST_ENV_DIR}/s3.pid`, 'utf8').trim() || 0);
}

/** Starts a Node process under the service's V8 flags (as `pnpm start` runs it) and waits for its /health. */
export async function startHttpProcess(
  script: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  const child = spawn(process.execPath, [...STORAGE_NODE_FLAGS, '--import', 'tsx', script], {
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
