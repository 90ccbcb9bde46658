/**
 * The supervisor behind `pnpm start`, with real child processes: a child that crashes is started again, one that
 * keeps crashing is given up on after backoff delays that double up to the cap, and stop() ends every child, and
 * whatever they started, without restarting any. No child outlives the supervisor, not even one killed with SIGKILL.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type RestartPolicy, type Supervised, Supervisor } from '../scripts/lib/supervisor.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'supervisor-test-'));
let supervisors: Supervisor[] = [];
afterEach(async () => {
  await Promise.all(supervisors.map((s) => s.stop(2_000)));
  supervisors = [];
});

/** A supervisor whose log lines are kept for the test to read. */
function supervisor(policy: Partial<RestartPolicy>, onGiveUp?: (s: Supervised) => void) {
  const lines: string[] = [];
  const s = new Supervisor({ policy, log: (line) => lines.push(line), output: () => {}, onGiveUp });
  supervisors.push(s);
  return { s, lines };
}

/**
 * A Node child running `body`; it first appends `<pid> <time>` to `startsFile`, so the test can count its starts.
 */
function nodeChild(name: string, startsFile: string, body: string) {
  const script = `require('fs').appendFileSync(${JSON.stringify(startsFile)}, process.pid + ' ' + Date.now() + '\\n');\n${body}`;
  return { name, args: ['-e', script], cwd: dir };
}
const KEEP_RUNNING = 'setInterval(() => {}, 1000);';
const starts = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split(' ').map(Number) as [number, number])
    : [];
/**
 * Whether the process runs. A zombie does not: it exited and waits to be reaped by whoever adopted it, which (a
 * grandchild whose parent died first, as happens on a loaded machine) may be an init that is slow to reap, or never.
 */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    // /proc/<pid>/stat: "pid (comm) state ...": the state follows the last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
};
async function until(what: string, check: () => boolean, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Code for a child that starts a Node grandchild running `body` (detached from nothing: in the child's group). */
/** The PID a child wrote to `file`, once it is there whole (the file exists, empty, before its write lands). */
const pidIn = (file: string): number | undefined => {
  const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
  return /^\d+$/.test(text) ? Number(text) : undefined;
};
const spawnGrandchild = (pidFile: string, body: string) =>
  `const g = require('child_process').spawn(process.execPath, ['-e', ${JSON.stringify(body)}], { stdio: 'ignore' }); ` +
  `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(g.pid));`;

describe('Supervisor', () => {
  it('restarts a child that crashes, logging its exit code, and the new child keeps running', async () => {
    const file = path.join(dir, 'crash-once');
    const marker = path.join(dir, 'crash-once.marker');
    const { s, lines } = supervisor({ initialDelayMs: 50 });
    // Crashes with code 3 on its first run only.
    const child = s.start(
      nodeChild(
        'crash-once',
        file,
        `const fs = require('fs'); if (!fs.existsSync(${JSON.stringify(marker)})) { fs.writeFileSync(${JSON.stringify(marker)}, ''); process.exit(3); } ${KEEP_RUNNING}`,
      ),
    );
    await until('the restart', () => starts(file).length === 2 && child.state === 'running' && child.pid !== undefined);
    const [first, second] = starts(file).map(([pid]) => pid);
    expect(second).not.toBe(first);
    expect(child.pid).toBe(second);
    expect(child.restarts).toBe(1);
    expect(alive(second as number)).toBe(true);
    expect(lines.join('\n')).toMatch(
      new RegExp(`crash-once \\(pid ${first}\\) exited \\(code 3\\).*restart 1 in 50 ms`),
    );

    // Killed from outside (as `kill -9` would): started again, the exit logged with the signal.
    process.kill(second as number, 'SIGKILL');
    await until('the second restart', () => starts(file).length === 3 && child.state === 'running');
    expect(lines.join('\n')).toMatch(new RegExp(`crash-once \\(pid ${second}\\) exited \\(signal SIGKILL\\)`));
    expect(child.restarts).toBe(2);
  });

  it('gives up on a child that keeps crashing, after delays that double up to the cap', async () => {
    const file = path.join(dir, 'always-crash');
    const givenUp: string[] = [];
    const { s, lines } = supervisor(
      { initialDelayMs: 100, maxDelayMs: 250, maxRapidCrashes: 4, stableAfterMs: 10_000 },
      (g) => givenUp.push(g.name),
    );
    const child = s.start(nodeChild('always-crash', file, 'process.exit(1);'));
    await until('the give-up', () => child.state === 'given-up');
    expect(givenUp).toEqual(['always-crash']);
    const log = lines.join('\n');
    expect([...log.matchAll(/restart \d+ in (\d+) ms/g)].map((m) => Number(m[1]))).toEqual([100, 200, 250]);
    expect(log).toMatch(/always-crash .*exited \(code 1\).*crashed 4 times in a row.*giving up/);
    // Four runs, each at least the logged delay after the one before.
    const times = starts(file).map(([, t]) => t);
    expect(times).toHaveLength(4);
    const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
    for (const [i, min] of [100, 200, 250].entries()) expect(gaps[i]).toBeGreaterThanOrEqual(min);
    // And no fifth.
    await sleep(400);
    expect(starts(file)).toHaveLength(4);
    expect(child.pid).toBeUndefined();
  });

  it('counts only rapid crashes: a child that crashes after a stable run is never given up on', async () => {
    const file = path.join(dir, 'stable-then-crash');
    const { s, lines } = supervisor({ initialDelayMs: 20, maxRapidCrashes: 2, stableAfterMs: 150 });
    const child = s.start(nodeChild('stable-then-crash', file, 'setTimeout(() => process.exit(2), 250);'));
    await until('four runs', () => starts(file).length >= 4, 15_000);
    expect(child.state).not.toBe('given-up');
    // The delay starts anew after every stable run.
    expect([...lines.join('\n').matchAll(/restart \d+ in (\d+) ms/g)].map((m) => Number(m[1]))).toEqual(
      Array(starts(file).length - 1).fill(20),
    );
  });

  it('stop() ends every child and restarts none', async () => {
    const a = path.join(dir, 'stop-a');
    const b = path.join(dir, 'stop-b');
    const { s, lines } = supervisor({ initialDelayMs: 20 });
    const first = s.start(nodeChild('a', a, KEEP_RUNNING));
    const second = s.start(nodeChild('b', b, KEEP_RUNNING));
    await until('both running', () => starts(a).length === 1 && starts(b).length === 1);
    const pids = [first.pid, second.pid] as number[];
    await s.stop();
    for (const pid of pids) expect(alive(pid)).toBe(false);
    expect([first.state, second.state]).toEqual(['stopped', 'stopped']);
    await sleep(200);
    expect([starts(a).length, starts(b).length]).toEqual([1, 1]);
    expect(lines.join('\n')).not.toMatch(/restart/);
  });

  it('stop() kills a child that ignores SIGTERM once the timeout passes', async () => {
    const file = path.join(dir, 'stubborn');
    // Said once its handler is in place (its start line comes before it: a stop right after it would race it).
    const listening = path.join(dir, 'stubborn-listening');
    const { s, lines } = supervisor({});
    const child = s.start(
      nodeChild(
        'stubborn',
        file,
        `process.on('SIGTERM', () => {}); require('fs').writeFileSync(${JSON.stringify(listening)}, '1'); ${KEEP_RUNNING}`,
      ),
    );
    await until('running', () => starts(file).length === 1 && existsSync(listening));
    const pid = child.pid as number;
    const t0 = Date.now();
    await s.stop(300);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    expect(alive(pid)).toBe(false);
    expect(lines.join('\n')).toMatch(/stubborn \(pid \d+\) did not stop within 300 ms; killing it/);
  });

  it('stop() asks each child to stop with its own signal where it names one (nginx: SIGQUIT)', async () => {
    const file = path.join(dir, 'quits');
    const graceful = path.join(dir, 'quit-gracefully');
    // Said once its handlers are in place (its start line comes before them: a stop right after it would race them).
    const listening = path.join(dir, 'quits-listening');
    const { s } = supervisor({});
    s.start({
      ...nodeChild(
        'quits',
        file,
        `process.on('SIGTERM', () => {}); process.on('SIGQUIT', () => { require('fs').writeFileSync(${JSON.stringify(graceful)}, 'quit'); process.exit(0); }); require('fs').writeFileSync(${JSON.stringify(listening)}, '1'); ${KEEP_RUNNING}`,
      ),
      stopSignal: 'SIGQUIT',
    });
    await until('running', () => starts(file).length === 1 && existsSync(listening));
    const t0 = Date.now();
    await s.stop(5000);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(readFileSync(graceful, 'utf8')).toBe('quit');
  });

  it('stop() stops the children named last only once the others have exited (a service drains with its store up)', async () => {
    const store = path.join(dir, 'store');
    const service = path.join(dir, 'service');
    const stoppedAt = path.join(dir, 'stopped-at');
    // Each writes down when its SIGTERM came and when it went; the service takes its time to drain.
    const onTerm = (name: string, ms: number) =>
      `process.on('SIGTERM', () => { require('fs').appendFileSync(${JSON.stringify(stoppedAt)}, '${name} term ' + Date.now() + '\\n'); ` +
      `setTimeout(() => { require('fs').appendFileSync(${JSON.stringify(stoppedAt)}, '${name} gone ' + Date.now() + '\\n'); process.exit(0); }, ${ms}); }); ${KEEP_RUNNING}`;
    const { s } = supervisor({});
    s.start(nodeChild('store', store, onTerm('store', 0)));
    s.start(nodeChild('service', service, onTerm('service', 300)));
    await until('both running', () => starts(store).length === 1 && starts(service).length === 1);
    // Their handlers are set once their first line ran: a moment for the rest of it.
    await sleep(300);
    await s.stop(5000, ['store']);
    const events = readFileSync(stoppedAt, 'utf8').trim().split('\n');
    expect(events.map((e) => e.split(' ').slice(0, 2).join(' '))).toEqual([
      'service term',
      'service gone',
      'store term',
      'store gone',
    ]);
  });

  it('stop() stops what a child started too', async () => {
    const file = path.join(dir, 'parent');
    const grandchildFile = path.join(dir, 'parent.grandchild');
    const { s } = supervisor({});
    s.start(nodeChild('parent', file, `${spawnGrandchild(grandchildFile, KEEP_RUNNING)} ${KEEP_RUNNING}`));
    await until('the grandchild', () => pidIn(grandchildFile) !== undefined);
    const grandchild = pidIn(grandchildFile)!;
    expect(alive(grandchild)).toBe(true);
    await s.stop(2_000);
    await until('the grandchild to stop', () => !alive(grandchild));
  });

  it('stop() during a restart delay cancels the restart', async () => {
    const file = path.join(dir, 'pending');
    const { s } = supervisor({ initialDelayMs: 300 });
    const child = s.start(nodeChild('pending', file, 'process.exit(1);'));
    await until('waiting to restart', () => child.state === 'restarting');
    await s.stop();
    await sleep(500);
    expect(starts(file)).toHaveLength(1);
    expect(child.state).toBe('stopped');
  });
});

describe('Supervisor, killed', () => {
  it('takes its children and what they started with it, even killed with SIGKILL', { timeout: 30_000 }, async () => {
    const graceful = path.join(dir, 'lifeline-graceful');
    const grandchildFile = path.join(dir, 'lifeline-grandchild');
    // Each says 'ready' once its own code has run (its handlers are in place), which a busy machine can take a while
    // to come to after its start.
    const ready = `console.log('ready');`;
    const children = {
      // Stops gracefully on SIGTERM, taking a moment, and says so.
      graceful: `process.on('SIGTERM', () => setTimeout(() => { require('fs').writeFileSync(${JSON.stringify(graceful)}, 'stopped'); process.exit(0); }, 200)); ${ready} ${KEEP_RUNNING}`,
      // Has no SIGTERM handler, and started a grandchild that ignores SIGTERM.
      parent: `${spawnGrandchild(grandchildFile, `process.on('SIGTERM', () => {}); ${KEEP_RUNNING}`)} ${ready} ${KEEP_RUNNING}`,
      // Ignores SIGTERM: killed once the grace period (here 1 s) has passed.
      stubborn: `process.on('SIGTERM', () => {}); ${ready} ${KEEP_RUNNING}`,
    };
    const host = spawn(
      process.execPath,
      ['--import', 'tsx', 'tests/support/supervisor-host.ts', JSON.stringify(children), '1000'],
      { cwd: path.join(import.meta.dirname, '..'), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    host.stdout.on('data', (d) => {
      out += d;
    });
    try {
      await until(
        'every child',
        () =>
          out.match(/started \(pid \d+\)/g)?.length === 3 &&
          out.match(/\] ready$/gm)?.length === 3 &&
          pidIn(grandchildFile) !== undefined,
        20_000,
      );
      const pids = [...out.matchAll(/\[start\] \S+ started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
      pids.push(pidIn(grandchildFile)!);
      // Every child has its lifeline preloaded before its own code runs, which has run by now.
      host.kill('SIGKILL');
      const t0 = Date.now();
      await until('every child and the grandchild to stop', () => pids.every((pid) => !alive(pid)), 14_000);
      // Within the 1 s grace it was given and a busy machine's delays, short of the default grace (15 s).
      expect(Date.now() - t0).toBeLessThan(12_000);
      expect(readFileSync(graceful, 'utf8')).toBe('stopped');
    } finally {
      host.kill('SIGKILL');
    }
  });
});
