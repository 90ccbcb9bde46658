/**
 * The daemon as a process, as a provider runs it (`node --import tsx src/main.ts` with a configuration file): tests
 * of what only the whole program does (its start-up, its NATS connection, a clean stop on a signal).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Waits until `done(read())`, polling every 50 ms, at most `ms`; the last value read. */
export async function until<T>(read: () => Promise<T> | T, done: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface DaemonProcess {
  child: ChildProcess;
  /** Its standard output, line by line (JSON log lines). */
  log: string[];
  /** The exit code, once it exited. */
  exited: Promise<number | null>;
  /** The machine it attached to. */
  providerId: string;
}

/**
 * Starts a daemon with `config` (its state file in `dir`, unless the config names one) and waits until it attached to
 * its machine (the provider ID in its state file), at most `attachMs`.
 */
export async function startDaemonProcess(
  dir: string,
  config: Record<string, unknown>,
  attachMs = 30_000,
): Promise<DaemonProcess> {
  const stateFile = (config.state_file as string | undefined) ?? join(dir, `state-${randomUUID()}.json`);
  const configFile = join(dir, `daemon-${randomUUID()}.json`);
  writeFileSync(configFile, JSON.stringify({ log_level: 'info', ...config, state_file: stateFile }), { mode: 0o600 });
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: join(import.meta.dirname, '../..'),
    env: { ...process.env, DAEMON_CONFIG_FILE: configFile },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const log: string[] = [];
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    log.push(...lines);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const providerId = await until(
    () => {
      try {
        return (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id;
      } catch {
        return undefined;
      }
    },
    (id) => id !== undefined || child.exitCode !== null,
    attachMs,
  );
  if (!providerId) {
    child.kill('SIGKILL');
    throw new Error(`the daemon did not attach to its machine:\n${log.join('\n')}`);
  }
  return { child, log, exited, providerId };
}

/** Stops the daemons as an operator would (SIGTERM: their workloads stop too), SIGKILL after `graceMs`. */
export async function stopDaemonProcesses(daemons: DaemonProcess[], graceMs = 20_000): Promise<void> {
  await Promise.all(
    daemons.map(async ({ child, exited }) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const kill = setTimeout(() => child.kill('SIGKILL'), graceMs);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(kill);
    }),
  );
}
