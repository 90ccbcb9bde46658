/** A service (or fixture) started as its own Node process, for tests of start-up, signals and shutdown. */
import { type ChildProcess, spawn } from 'node:child_process';

export interface ServerProcess {
  child: ChildProcess;
  /** Everything it has written so far, stdout and stderr together. */
  output: () => string;
  /** Resolves with its exit code (null when a signal ended it) and the time it exited. */
  exited: Promise<{ code: number | null; at: number }>;
}

/**
 * Starts `node --import tsx <script>` in `cwd` with exactly `env` (pass `process.env` in it to inherit), collecting
 * its output.
 */
export function spawnServer(script: string, opts: { cwd?: string; env: NodeJS.ProcessEnv }): ServerProcess {
  return spawnProcess(process.execPath, ['--import', 'tsx', script], opts);
}

/** Starts any program (a server of another kind: nginx) the way `spawnServer` starts a Node one. */
export function spawnProcess(
  command: string,
  args: string[],
  opts: { cwd?: string; env: NodeJS.ProcessEnv },
): ServerProcess {
  const child = spawn(command, args, {
    cwd: opts.cwd,
    env: opts.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = gatherOutput(child);
  const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.once('exit', (code) => resolve({ code, at: Date.now() })),
  );
  return { child, output, exited };
}

/** What a child prints, standard output and error together, as it comes: read by calling the function. */
export function gatherOutput(child: ChildProcess): () => string {
  let output = '';
  for (const stream of [child.stdout, child.stderr]) {
    stream?.on('data', (d) => {
      output += d;
    });
  }
  return () => output;
}

/**
 * Polls `url` until it answers at all (`ok` set: until it answers 2xx) and returns that response; throws with the
 * process's output when the process exits first or `timeoutMs` passes.
 */
export async function waitForHttp(
  url: string,
  proc: ServerProcess,
  opts: { ok?: boolean; timeoutMs?: number } = {},
): Promise<Response> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    const res = await fetch(url).catch(() => undefined);
    if (res && (!opts.ok || res.ok)) return res;
    if (Date.now() > deadline || proc.child.exitCode !== null) {
      throw new Error(`server did not start:\n${proc.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether something takes TCP connections on `port` of 127.0.0.1 now. */
async function acceptsTcp(port: number): Promise<boolean> {
  const { connect } = await import('node:net');
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Polls until `proc` takes TCP connections on `port` of 127.0.0.1 (a server that speaks no HTTP: nats-server); throws
 * with the process's output when the process exits first or `timeoutMs` passes.
 */
export async function waitForTcp(port: number, proc: ServerProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await acceptsTcp(port))) {
    if (Date.now() > deadline || proc.child.exitCode !== null) {
      throw new Error(`server did not start:\n${proc.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A TCP port nobody listens on right now, chosen by the kernel. Tests that start their own server process use it
 * instead of a fixed number: a fixed port in the ephemeral range (32768-60999 on Linux) can be held at that moment by
 * any outgoing connection on the machine, and the server then fails with EADDRINUSE.
 */
export async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}
