/**
 * The `gpu` command line as a person runs it: a child process (`node --import tsx tools/cli/src/main.ts`) against a
 * platform's origin, with its own configuration folder, standard input when given, and what it printed.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../../../..', import.meta.url));

/**
 * How long a test of the command line may take: each `gpu` it runs is a Node process of its own (seconds each on a
 * busy machine), and a test runs a dozen or more, so the suite's 60 s would time out tests that work. A guard against
 * a hang, not a measure of speed.
 */
export const CLI_TEST_MS = 240_000;
const MAIN = 'tools/cli/src/main.ts';

export interface GpuResult {
  code: number;
  stdout: string;
  stderr: string;
}

export type Gpu = (args: string[], opts?: { env?: Record<string, string>; input?: string }) => Promise<GpuResult>;

/** A `gpu` that talks to `url` with the configuration kept in `configDir`. */
export function gpuAt(url: string, configDir: string): Gpu {
  return (args, opts = {}) =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
        cwd: root,
        env: { ...process.env, GPU_URL: url, GPU_CONFIG_DIR: configDir, NO_COLOR: '1', ...opts.env },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk) => {
        stdout += chunk;
      });
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      child.on('error', reject);
      child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
      child.stdin.end(opts.input ?? '');
    });
}

/** The command line that runs `gpu args` (for a program that runs it itself, such as `script` for a terminal). */
export function gpuCommandLine(args: string[]): string[] {
  return [process.execPath, '--import', 'tsx', MAIN, ...args];
}
