/**
 * scripts/test-env.sh, which every `pnpm test` and `pnpm bench` runs: what it starts, it stops. Run here on ports and a
 * folder of its own (TEST_PORT_BASE, TEST_ENV_DIR), with the PATH `pnpm` gives scripts, where `node` is the shell
 * wrapper of the project's node package: a PID file holding the wrapper's PID would stop the wrapper and leave the
 * server running on its port for the next run to find.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Whether something accepts connections on 127.0.0.1:port. */
const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

it('stops every server it started: nothing is left on their ports', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'test-env-'));
  // Below Linux's ephemeral range (32768-60999): no other test's listen(0) or outgoing connection can hold them.
  const base = 23_400;
  try {
    const script = `source scripts/test-env.sh; test_env_up >/dev/null 2>&1
      for p in ${base} ${base + 1} ${base + 2} ${base + 3} ${base + 4}; do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && echo up $p; done
      test_env_down`;
    const out = execFileSync('bash', ['-c', script], {
      cwd: root,
      env: { ...process.env, TEST_PORT_BASE: String(base), TEST_ENV_DIR: dir },
      encoding: 'utf8',
    });
    // PostgreSQL, NATS, the S3 server, the Consul stand-in and the Solana localnet were up...
    expect(out.trim().split('\n')).toEqual([0, 1, 2, 3, 4].map((i) => `up ${base + i}`));
    // ...and none is once it has stopped them.
    for (let i = 0; i < 5; i++) expect(await listening(base + i), `port ${base + i}`).toBe(false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
