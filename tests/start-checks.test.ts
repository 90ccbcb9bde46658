/**
 * What `pnpm start` checks before it starts anything, and how it stops when interrupted during start-up. Settings
 * that cannot work (auth settings that do not fit together, a configuration file that does not exist, a port that is
 * held, a bad PLATFORM_HOST, PLATFORM_PORT_BASE, PLATFORM_GATEWAY or GATEWAY_OPERATORS) are refused in one line with exit status 1, nothing started and
 * nothing written to the data folder. Ctrl-C during start-up stops what had started, says neither "start-up failed"
 * nor "up", and exits 0 with its own last line, also as `pnpm start` at a terminal (pnpm prints no failure), and a
 * start whose gateway differs from the last one's on its data folder says so. A lock file left by a `pnpm start` that no longer runs does not stand in the way. Nothing it
 * started outlives it: not when its terminal is closed, not when it is killed with SIGKILL; and until what it ran is
 * gone, its data folder is not taken over, and a start on its ports names the process that holds them. Nor does it
 * outlive the test process that started it, killed with SIGKILL (its lifeline).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { lockDataDir } from '../scripts/lib/instance-lock.ts';
import { findNginx, pdeathsigSupported } from '../tools/gateway/src/nginx.ts';
import {
  health,
  isAlive,
  platformPlace,
  root,
  runStart,
  services,
  startedPids,
  startPlatform,
} from './support/platform-start.ts';

const place = platformPlace(2);
/**
 * The processes `pnpm start` runs: the four services, the S3 store, the chain, the mail catcher and the gateway, and
 * with nginx as the gateway (where it is installed, as the test setup does) its telemetry receiver.
 */
const nginxGateway = (() => {
  const nginx = findNginx();
  return Boolean(nginx && !nginx.tooOld && pdeathsigSupported());
})();
const PROCESSES = [...services, 's3', 'solana', 'mail', 'gateway', ...(nginxGateway ? ['gateway-telemetry'] : [])];
const secret = 'k'.repeat(48);
// The auth service's own configuration file, asking for HS256 without a secret.
const authConfig = path.join(mkdtempSync(path.join(tmpdir(), 'auth-config-')), 'auth.yaml');
writeFileSync(authConfig, 'jwt:\n  algorithm: HS256\n');

/** `pnpm start` with `env` on a new data folder: its exit code, its output and what it left in the folder. */
async function start(env: Record<string, string>) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-checks-'));
  return { ...(await runStart({ ...place.env(dataDir), ...env })), left: readdirSync(dataDir) };
}

// An nginx older than pnpm start's configuration takes (1.18, as Debian 11 and Ubuntu 22.04 ship), first on PATH.
const oldNginx = mkdtempSync(path.join(tmpdir(), 'old-nginx-'));
writeFileSync(path.join(oldNginx, 'nginx'), '#!/bin/sh\necho "nginx version: nginx/1.18.0" >&2\n', { mode: 0o755 });

const refusals: [string, Record<string, string>, string][] = [
  ['HS256 without a secret', { ALGORITHM: 'HS256' }, 'ALGORITHM=HS256 signs with a shared secret: set SECRET_KEY'],
  [
    'HS256 with a secret under 32 characters',
    { ALGORITHM: 'HS256', JWT_SECRET: 'k'.repeat(31) },
    'JWT_SECRET is 31 characters long; HS256 needs at least 32',
  ],
  [
    'two different secrets',
    { ALGORITHM: 'HS256', JWT_SECRET: secret, SECRET_KEY: `${secret}x` },
    'JWT_SECRET and SECRET_KEY are both set, to different values: set one',
  ],
  [
    'a secret with EdDSA, the default (it would be ignored)',
    { SECRET_KEY: secret },
    'SECRET_KEY is set, but the algorithm is EdDSA (the default), which signs with a key pair',
  ],
  [
    'a private key file beside HS256',
    { ALGORITHM: 'HS256', SECRET_KEY: secret, JWT_PRIVATE_KEY_FILE: '/etc/hostname' },
    'JWT_PRIVATE_KEY_FILE is for EdDSA, ES256 and RS256, but ALGORITHM is HS256',
  ],
  [
    'a private key file that does not exist',
    { JWT_PRIVATE_KEY_FILE: 'no-such-key.pem' },
    'JWT_PRIVATE_KEY_FILE no-such-key.pem does not exist',
  ],
  ['an unknown algorithm', { ALGORITHM: 'none' }, 'ALGORITHM none is not one of HS256, EdDSA, ES256, RS256'],
  [
    "HS256 without a secret in auth's configuration file",
    { AUTH_CONFIG_FILE: authConfig },
    'jwt.algorithm=HS256 signs with a shared secret: set SECRET_KEY',
  ],
  [
    'a configuration file that does not exist',
    { REGISTRY_CONFIG_FILE: 'no-such-registry.yaml' },
    'REGISTRY_CONFIG_FILE no-such-registry.yaml does not exist',
  ],
  ['a PLATFORM_HOST that is no address', { PLATFORM_HOST: 'example.com' }, 'PLATFORM_HOST must be an IP address'],
  ['a PLATFORM_PORT_BASE that is no port', { PLATFORM_PORT_BASE: '65530' }, 'PLATFORM_PORT_BASE must be a port'],
  [
    'a gateway it does not have',
    { PLATFORM_GATEWAY: 'apache' },
    'PLATFORM_GATEWAY must be nginx or node (or unset: nginx where installed), got apache',
  ],
  [
    'nginx named as the gateway where the one found is too old',
    { PLATFORM_GATEWAY: 'nginx', PATH: `${oldNginx}:${process.env.PATH}` },
    `PLATFORM_GATEWAY=nginx, but nginx 1.18.0 (${path.join(oldNginx, 'nginx')}) is older than 1.19.5`,
  ],
  [
    'an operator that is no address',
    { GATEWAY_OPERATORS: '127.0.0.1,the admins' },
    'GATEWAY_OPERATORS: operators: "the admins" is not an address or a CIDR',
  ],
];

describe('pnpm start, before it starts anything', () => {
  it.each(refusals)('refuses %s, in one line', { timeout: 60_000 }, async (_what, env, message) => {
    const { code, output, left } = await start(env);
    expect(code, output).toBe(1);
    expect(output).toMatch(/^\[start\] refused: [^\n]+\n$/);
    expect(output).toContain(message);
    expect(left).toEqual([]);
  });

  it('refuses a port something else holds, naming it, and leaves the data folder as it was', {
    timeout: 60_000,
  }, async () => {
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(place.ports.billing, '127.0.0.1', r));
    try {
      const { code, output, left } = await start({});
      expect(code, output).toBe(1);
      // This test's own process holds it.
      expect(output).toMatch(
        new RegExp(
          `^\\[start\\] refused: port in use on 127\\.0\\.0\\.1: ${place.ports.billing} \\(billing\\) by pid ${process.pid} ` +
            '\\(node [^\\n]+\\): stop what holds it, or set PLATFORM_PORT_BASE\\n$',
        ),
      );
      expect(left).toEqual([]);
    } finally {
      holder.close();
    }
  });
});

describe('pnpm start, interrupted', () => {
  it('stops on Ctrl-C at its terminal during start-up with its own last line, exit status 0 from pnpm; says its gateway changed; a stale lock does not stop it', {
    timeout: 120_000,
  }, async () => {
    // A data folder whose lock names a pid that runs no pnpm start (a crashed one's): taken over. Its last start ran
    // the other gateway than this one does (nginx where installed, as the test setup does).
    const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-checks-'));
    writeFileSync(path.join(dataDir, 'platform.lock'), '999999999\n');
    writeFileSync(path.join(dataDir, 'last-gateway'), nginxGateway ? 'node\n' : 'nginx\n');
    // `pnpm start` itself, as a person types it at a terminal (util-linux's script, a pseudo-terminal): a Ctrl-C
    // typed there reaches the whole foreground process group, pnpm and its shell as well as the script.
    // Its PATH is a person's: without the checkout's node_modules/.bin that pnpm test puts first (whose `node` is a
    // shell script that would run pnpm itself, and die of the Ctrl-C).
    const PATH = (process.env.PATH ?? '')
      .split(':')
      .filter((dir) => !dir.includes('node_modules/.bin'))
      .join(':');
    // `exec`: the shell script starts (SHELL, or /bin/sh where none is set: dash, which a Ctrl-C kills while it
    // waits, 130) becomes pnpm, as a person's interactive shell, which ignores the Ctrl-C, reports pnpm's status.
    const terminal = spawn('script', ['-qfec', 'exec pnpm start', '/dev/null'], {
      cwd: root,
      env: { ...process.env, PATH, LOG_LEVEL: 'warn', ...place.env(dataDir) },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    terminal.stdout.on('data', (d) => {
      output += d;
    });
    const exited = new Promise<number | null>((r) => terminal.once('exit', (code) => r(code)));
    try {
      // Interrupted once one service answers while others are still starting: the one that answers stops gracefully,
      // taking its time, while the others are gone at once.
      const listening = async () =>
        (await Promise.all(services.map((name) => health(place.ports[name])))).filter(Boolean).length;
      const deadline = Date.now() + 90_000;
      while ((await listening()) === 0 && Date.now() < deadline && terminal.exitCode === null) {
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(startedPids(output), output).toHaveLength(PROCESSES.length);
      expect(output).not.toContain('[start] up');
      const gateways = nginxGateway ? ['nginx', 'the Node gateway'] : ['the Node gateway', 'nginx'];
      expect(output).toContain(`[start] the gateway is now ${gateways[0]} (it was ${gateways[1]})\r\n`);
      expect(readFileSync(path.join(dataDir, 'last-gateway'), 'utf8')).toBe(nginxGateway ? 'nginx\n' : 'node\n');
      terminal.stdin.write('\x03');
      // script's exit status is pnpm's: 0, nothing failed.
      expect(await exited, output).toBe(0);
      expect(output).toContain('[start] stopping');
      expect(output).not.toContain('start-up failed');
      expect(output).not.toContain('[start] up');
      expect(output).not.toContain('ELIFECYCLE');
      // Its own line is the last: pnpm adds none.
      const lines = output.split(/\r?\n/).filter((line) => line.trim() !== '');
      expect(lines.at(-1), output).toBe('[start] stopped: every process it ran has ended');
      expect(startedPids(output).filter(isAlive)).toEqual([]);
      expect(readdirSync(dataDir)).not.toContain('platform.lock');
    } finally {
      terminal.kill('SIGKILL');
      killAll(platformProcesses(dataDir));
    }
  });
});

/** Waits until `check` holds; false when `timeoutMs` passed first. */
async function until(check: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

/** The processes a `pnpm start` output says it started, by name. */
const startedProcesses = (output: string) =>
  [...output.matchAll(/\[start\] (\S+) started \(pid (\d+)\)/g)].map((m) => ({
    name: m[1] as string,
    pid: Number(m[2]),
  }));

/**
 * The programs a `pnpm start` on `dataDir` runs, found without asking it: every process whose environment names the
 * data folder (they inherit it) and runs a compiled program (`dist/`), and nginx's master process (its title, which
 * nginx writes over its environment, names its folder in the data folder, `<data>/gateway`), read from /proc.
 */
function platformProcesses(dataDir: string): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const env = readFileSync(`/proc/${pid}/environ`, 'utf8');
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (/^nginx: master process .* -p \S+\/gateway /.test(cmdline))
          return cmdline.includes(` -p ${path.join(dataDir, 'gateway')} `);
        return env.split('\0').includes(`PLATFORM_DATA_DIR=${dataDir}`) && cmdline.includes('/dist/');
      } catch {
        return false;
      }
    })
    .map(Number);
}

const killAll = (pids: number[]) => {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone.
    }
  }
};

describe('pnpm start, gone', () => {
  it('takes its processes with it when killed with SIGKILL; until they are gone its folder and ports name them', {
    timeout: 300_000,
  }, async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-killed-'));
    const platform = startPlatform(place, {}, dataDir);
    let started: { name: string; pid: number }[] = [];
    try {
      expect(await platform.untilPrinted('[start] up', 200_000), platform.output().slice(-4000)).toContain(
        '[start] up',
      );
      started = startedProcesses(platform.output());
      expect(started.map((p) => p.name).sort()).toEqual([...PROCESSES].sort());
      // One of them too busy to notice at once (stopped here), so that it still runs after the others are gone.
      const billing = started.find((p) => p.name === 'billing')?.pid as number;
      process.kill(billing, 'SIGSTOP');
      platform.child.kill('SIGKILL');
      const killed = Date.now();
      // Each stops as on SIGTERM (the services gracefully, within their 10 s shutdown_timeout), its output gone; the
      // deadline leaves a busy machine (a full test run beside it) time to finish the stopping it began.
      const others = started.filter((p) => p.pid !== billing);
      const gone = await until(() => others.every((p) => !isAlive(p.pid)), 25_000);
      const left = others.filter((p) => isAlive(p.pid)).map((p) => p.name);
      expect(gone, `still running 25 s after: ${left.join(', ')}`).toBe(true);
      expect(Date.now() - killed).toBeLessThan(25_000);

      // While billing runs, its data folder is not taken over, whatever the ports...
      const sameFolder = await runStart({
        ...place.env(dataDir),
        PLATFORM_PORT_BASE: String(Number(place.portBase) + 20),
      });
      expect(sameFolder.code, sameFolder.output).toBe(1);
      expect(sameFolder.output).toBe(
        `[start] refused: the data folder ${dataDir} is still in use by what the pnpm start of pid ${platform.child.pid} ` +
          `ran, though it is gone: billing (pid ${billing}); they stop on their own within 15 s (or stop them: kill ${billing})\n`,
      );
      // ...and a start on its ports says who holds them.
      const samePorts = await runStart(place.env(mkdtempSync(path.join(tmpdir(), 'platform-killed-other-'))));
      expect(samePorts.code, samePorts.output).toBe(1);
      expect(samePorts.output).toMatch(
        new RegExp(
          `^\\[start\\] refused: port in use on 127\\.0\\.0\\.1: ${place.ports.billing} \\(billing\\) by pid ${billing} ` +
            `\\(node [^\\n]*services/billing/dist/src/server\\.js\\): stop what holds it, or set PLATFORM_PORT_BASE\\n$`,
        ),
      );
      // Going on, it notices and stops too; then the folder is free.
      process.kill(billing, 'SIGCONT');
      expect(await until(() => !isAlive(billing), 25_000), 'billing still running 25 s after SIGCONT').toBe(true);
      lockDataDir(dataDir).release();
    } finally {
      killAll(started.map((p) => p.pid));
      await platform.stop();
    }
  });

  it('stops with the process that started it, even one killed with SIGKILL (a test runner killed)', {
    timeout: 300_000,
  }, async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-orphan-'));
    // A test's process of its own that starts the platform as every test does, killed below as a runner can be.
    const host = spawn(process.execPath, ['--import', 'tsx', 'tests/support/platform-host.ts', dataDir], {
      cwd: root,
      env: { ...process.env, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let report = '';
    host.stdout?.on('data', (d) => {
      report += d;
    });
    let pids: number[] = [];
    try {
      expect(await until(() => report.includes('\n') || host.exitCode !== null, 230_000), 'no report').toBe(true);
      const { start, output } = JSON.parse(report) as { start: number; output: string };
      expect(output).toContain('[start] up');
      const started = startedProcesses(output);
      expect(started.map((p) => p.name).sort()).toEqual([...PROCESSES].sort());
      pids = [start, ...started.map((p) => p.pid)];
      host.kill('SIGKILL');
      // pnpm start hears its lifeline close and stops as on SIGTERM, its programs with it: nothing left, no port held.
      expect(await until(() => !pids.some(isAlive), 45_000), `still running: ${pids.filter(isAlive)}`).toBe(true);
      for (const name of services) expect(await health(place.ports[name]), name).toBeUndefined();
      expect(readdirSync(dataDir)).not.toContain('platform.lock');
    } finally {
      host.kill('SIGKILL');
      killAll(pids);
      killAll(platformProcesses(dataDir));
    }
  });

  it('stops everything gracefully and exits 0 when its terminal is closed (SIGHUP)', { timeout: 120_000 }, async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'platform-hangup-'));
    const work = mkdtempSync(path.join(tmpdir(), 'platform-terminal-'));
    const status = path.join(work, 'status');
    // The terminal's shell (its session leader, which a hangup ends) runs pnpm start in the foreground, under a shell
    // that outlives the hangup to write down how pnpm start ended.
    writeFileSync(path.join(work, 'terminal.sh'), `sh '${path.join(work, 'job.sh')}'\necho\n`);
    writeFileSync(
      path.join(work, 'job.sh'),
      `trap true HUP\n'${process.execPath}' --import tsx scripts/start.ts\necho $? > '${status}'\n`,
    );
    // A terminal of its own (util-linux's script, on a pseudo-terminal): pnpm start's output goes there.
    const terminal = spawn('script', ['-qfec', `sh '${path.join(work, 'terminal.sh')}'`, '/dev/null'], {
      cwd: root,
      env: { ...process.env, LOG_LEVEL: 'warn', ...place.env(dataDir) },
      stdio: 'ignore',
    });
    let started: number[] = [];
    try {
      expect(
        await until(() => platformProcesses(dataDir).length === PROCESSES.length, 90_000),
        'every process started',
      ).toBe(true);
      started = platformProcesses(dataDir);
      // The terminal window is closed.
      terminal.kill('SIGKILL');
      expect(await until(() => existsSync(status), 30_000), 'pnpm start still running 30 s after the hangup').toBe(
        true,
      );
      expect(readFileSync(status, 'utf8').trim()).toBe('0');
      expect(started.filter(isAlive)).toEqual([]);
      expect(readdirSync(dataDir)).not.toContain('platform.lock');
    } finally {
      terminal.kill('SIGKILL');
      killAll(platformProcesses(dataDir));
    }
  });
});
