/**
 * The workload sandbox against the real bubblewrap (Debian's `bubblewrap`, installed by the test setup) on a
 * simulated 8-GPU machine: every check is real except the GPU. A workload runs its argv as given, sees only the GPUs
 * it leased, and cannot read the daemon's files or another session's; a workload that reaches for the network, forks
 * without end, fills the disk, ignores SIGTERM or outlives its daemon is refused or contained, and the machine's other
 * workloads run on.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { daemonConfigSchema } from '../src/config.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { cgroupPlace, workloadCgroup } from '../src/workloads/cgroups.ts';
import { commandProblem } from '../src/workloads/command.ts';
import { controlDevices, nvidiaDevices, simulatedDevices } from '../src/workloads/devices.ts';
import { prepareDisk, releaseDisk } from '../src/workloads/disk.ts';
import { running as alive } from '../src/workloads/processes.ts';
import {
  boundedCopy,
  descendants,
  SANDBOX_PATH,
  type SandboxOptions,
  sandboxView,
  startSandbox,
} from '../src/workloads/sandbox.ts';
import { SANDBOX_LIMITS } from './support/sandbox-fixtures.ts';

const root = mkdtempSync(path.join(tmpdir(), 'sandbox-test-'));
// As the daemon's run directory: workloads' users pass through it to their own work directory, and list nothing.
chmodSync(root, 0o711);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const isRoot = process.getuid?.() === 0;
let nextUid = 200_000 + Math.floor(Math.random() * 10_000) * 10;

const machine = daemonConfigSchema.parse({
  gpu: {
    source: 'simulated',
    simulated_gpus: Array.from({ length: 8 }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 })),
  },
});
const readings = await gpuSource(machine.gpu).read();
const devices = simulatedDevices(path.join(root, 'dev'), readings);

/** The daemon's own files, which no workload may read. */
const daemonDir = path.join(root, 'daemon');
mkdirSync(daemonDir);
writeFileSync(path.join(daemonDir, 'credentials.json'), '{"client_secret":"s3cr3t"}', { mode: 0o600 });

/** The limits of the tests' sandboxes. */
const LIMITS = SANDBOX_LIMITS;
/** The sessions' directories whose disks are released at the end. */
const sessions: string[] = [];
afterAll(async () => {
  for (const dir of sessions) await releaseDisk(dir);
});
/** As the runner chooses: a filesystem of its own where the daemon can mount one (root), else the watch. */
const kindHere = isRoot ? 'filesystem' : 'watch';

/**
 * A sandbox for `command` on the leased GPUs (indices), its disk and log directory made as the daemon makes them
 * (`disk`: which kind of disk; the machine's by default).
 */
async function run(
  command: string[],
  over: Partial<Omit<SandboxOptions, 'disk'>> & { leased?: number[]; disk?: 'filesystem' | 'watch' } = {},
) {
  const name = `s-${Math.random().toString(36).slice(2, 8)}`;
  const dir = path.join(root, name);
  const logDir = path.join(dir, 'logs');
  mkdirSync(logDir, { recursive: true });
  chmodSync(dir, 0o711);
  const uid = isRoot ? nextUid++ : undefined;
  const { leased = [0], disk: kind = kindHere, ...rest } = over;
  const limits = rest.limits ?? LIMITS;
  const disk = await prepareDisk(dir, limits, kind, uid ?? null);
  sessions.push(dir);
  const sandbox = startSandbox({
    spec: { command, env: {}, max_runtime_seconds: 60, network: false, inputs: [] },
    disk,
    logDir,
    gpus: leased.map((i) => ({ uuid: readings[i]!.uuid, device: devices.get(i)! })),
    controlDevices: [],
    limits,
    uid,
    hidden: [],
    platformEnv: { GPU_PLATFORM_SESSION_ID: name },
    stopGraceMs: 500,
    ...rest,
  });
  const out = () => readFileSync(path.join(logDir, 'stdout.log'), 'utf8');
  const err = () => readFileSync(path.join(logDir, 'stderr.log'), 'utf8');
  return { sandbox, workDir: disk.workDir, disk, logDir, out, err };
}

describe('a workload in the sandbox', () => {
  it('runs its argv as given, never through a shell, and ends with its own exit code', async () => {
    const echo = await run(['/bin/echo', 'hello', '$HOME;', 'rm -rf /', '`id`']);
    expect(await echo.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 0 });
    expect(echo.out()).toBe('hello $HOME; rm -rf / `id`\n');
    const failing = await run(['sh', '-c', 'echo to stderr >&2; exit 3']);
    expect(await failing.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 3 });
    expect(failing.err()).toBe('to stderr\n');
    // A program that does not exist: bwrap says so, and the workload exits non-zero.
    const missing = await run(['no-such-program']);
    expect((await missing.sandbox.ended).state).toBe('exited');
    expect(missing.err()).toMatch(/no-such-program/);
  });

  it("gives the renter's environment to the workload alone: not to the tools around it, not on a command line", async () => {
    const w = await run(['sh', '-c', 'echo "$SECRET_TOKEN $GCONV_PATH"; sleep 2'], {
      spec: {
        command: ['sh', '-c', 'echo "$SECRET_TOKEN $GCONV_PATH"; sleep 2'],
        env: { SECRET_TOKEN: 'tok-4f9a', GCONV_PATH: '/work/evil' },
        max_runtime_seconds: 60,
        network: false,
        inputs: [],
      },
    });
    await w.sandbox.ready;
    // bwrap (prlimit and setpriv before it, one process) runs outside the sandbox as the daemon's user: it started
    // with the daemon's PATH alone, and its command line names no value of the renter's.
    const environ = readFileSync(`/proc/${w.sandbox.pid}/environ`, 'utf8').split('\0').filter(Boolean);
    expect(environ.map((e) => e.split('=')[0])).toEqual(['PATH']);
    expect(readFileSync(`/proc/${w.sandbox.pid}/cmdline`, 'utf8')).not.toContain('tok-4f9a');
    expect(await w.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 0 });
    expect(w.out()).toBe('tok-4f9a /work/evil\n');
  });

  it('sees only its leased GPUs, named by UUID, and its own work directory', async () => {
    const w = await run(
      [
        'sh',
        '-c',
        'ls /dev | grep nvidia; echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$HOME|$PWD"; cat /dev/nvidia2; ' +
          'cat /dev/nvidia3 2>&1; echo x > mine.txt && echo wrote',
      ],
      { leased: [2, 5] },
    );
    expect(await w.sandbox.ended).toMatchObject({ state: 'exited' });
    const lines = w.out().trim().split('\n');
    expect(lines.slice(0, 2)).toEqual(['nvidia2', 'nvidia5']);
    expect(lines[2]).toBe('GPU-simulated-2,GPU-simulated-5|GPU-simulated-2,GPU-simulated-5|/work|/work');
    expect(lines[3]).toBe('simulated GPU 2 GPU-simulated-2');
    expect(lines[4]).toMatch(/nvidia3: No such file or directory/);
    expect(lines[5]).toBe('wrote');
    expect(readFileSync(path.join(w.workDir, 'mine.txt'), 'utf8')).toBe('x\n');
  });

  it("cannot read the daemon's credentials, another session's files, or the host's home and temp", async () => {
    const other = await run(['sh', '-c', 'echo secret-of-other > data.txt']);
    await other.sandbox.ended;
    const targets = [
      path.join(daemonDir, 'credentials.json'),
      path.join(other.workDir, 'data.txt'),
      devices.get(3)!,
      '/root',
      path.join(root),
    ];
    const w = await run([
      'sh',
      '-c',
      targets.map((t) => `cat ${t} 2>/dev/null || ls ${t} 2>/dev/null || echo gone`).join('; '),
    ]);
    expect(await w.sandbox.ended).toMatchObject({ state: 'exited' });
    expect(w.out().trim().split('\n')).toEqual(targets.map(() => 'gone'));
    // Nothing it could write reaches the host outside its work directory.
    const breakout = await run(['sh', '-c', `echo pwned > ${path.join(other.workDir, 'data.txt')} || echo refused`]);
    await breakout.sandbox.ended;
    expect(readFileSync(path.join(other.workDir, 'data.txt'), 'utf8')).toBe('secret-of-other\n');
  });

  it('writes nothing into its /dev, and its /dev/shm holds no more than its memory allowance', async () => {
    const w = await run([
      'sh',
      '-c',
      '(echo x > /dev/mine && echo wrote) 2>/dev/null || echo refused; echo shm > /dev/shm/ok && cat /dev/shm/ok; ' +
        "df -k /dev/shm | tail -1 | awk '{print $2}'",
    ]);
    expect(await w.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 0 });
    const [dev, shm, kib] = w.out().trim().split('\n');
    expect(dev).toBe('refused');
    expect(shm).toBe('shm');
    expect(Number(kib) * 1024).toBeLessThanOrEqual(LIMITS.memoryBytes);
  });

  it("reaches the network only when its spec allows it, and never the host's loopback services", async () => {
    const server = createServer((socket) => socket.end('hi\n')).listen(0, '0.0.0.0');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    // The machine's own address on its network, as another machine would reach it.
    const lan = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    const probe = (host: string) => `(exec 3<>/dev/tcp/${host}/${port} && cat <&3) 2>/dev/null || echo unreachable`;
    const script = [
      probe(lan ?? '192.0.2.1'),
      probe('127.0.0.1'),
      probe('10.0.2.2'),
      probe('169.254.169.254'),
      'ip route | grep -c "^default via 10.0.2.2 dev tap0" || true',
    ].join('; ');
    const command = ['bash', '-c', script];
    const closed = await run(command);
    const open = await run(command, { spec: { command, env: {}, max_runtime_seconds: 60, network: true, inputs: [] } });
    await Promise.all([closed.sandbox.ended, open.sandbox.ended]);
    server.close();
    // No network: no route anywhere.
    expect(closed.out()).toBe('unreachable\n'.repeat(4) + '0\n');
    // Its own user-mode network, a route out through slirp4netns; never the host (its loopback, its own address),
    // the private ranges or a cloud's metadata service.
    // (A daemon not running as root cannot fence: the host's own address is then reached as from its network.)
    const own = isRoot || !lan ? 'unreachable' : 'hi';
    expect(open.out()).toBe(`${own}\n${'unreachable\n'.repeat(3)}1\n`);
    // Without slirp4netns a workload that asked for the network does not start.
    const none = await run(command, {
      spec: { command, env: {}, max_runtime_seconds: 60, network: true, inputs: [] },
      slirpPath: '/nonexistent/slirp4netns',
    });
    expect(await none.sandbox.ended).toMatchObject({ state: 'failed', reason: 'network_unavailable' });
  });

  it("contains a fork bomb to its process limit while the machine's other workload runs on", async () => {
    const bomb = await run(['bash', '-c', 'f() { f | f & }; f; sleep 30'], {
      spec: {
        command: ['bash', '-c', 'f() { f | f & }; f; sleep 30'],
        env: {},
        max_runtime_seconds: 2,
        network: false,
        inputs: [],
      },
    });
    const neighbour = await run(['sh', '-c', 'sleep 0.5; for i in 1 2 3 4 5; do sh -c "echo $i"; done']);
    expect(await neighbour.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 0 });
    expect(neighbour.out()).toBe('1\n2\n3\n4\n5\n');
    if (isRoot) {
      // Its own user ID: the bomb never holds more than its allowance.
      expect(descendants(bomb.sandbox.pid).length).toBeLessThanOrEqual(64 + 2);
    }
    expect(await bomb.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'max_runtime' });
    expect(alive(bomb.sandbox.pid)).toBe(false);
  });

  it('is stopped when it fills its disk allowance; one file cannot pass it either', async () => {
    const filler = await run([
      'sh',
      '-c',
      'i=0; while true; do i=$((i+1)); head -c 4000000 /dev/zero > f$i; sleep 0.1; done',
    ]);
    expect(await filler.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    const big = await run(['sh', '-c', 'head -c 30000000 /dev/zero > big; echo "exit $?"']);
    await big.sandbox.ended;
    // RLIMIT_FSIZE: the write past the limit fails (SIGXFSZ kills the writer), the file stays at the limit.
    expect(big.out()).toMatch(/^exit [1-9]\d*\n$/);
    expect(statSync(path.join(big.workDir, 'big')).size).toBeLessThanOrEqual(20 * 1024 * 1024);
  });

  it('is killed after the grace period when it ignores SIGTERM, and no process of it is left', async () => {
    const w = await run(['bash', '-c', 'trap "" TERM; echo ready; sleep 1000 & wait']);
    // Up to 20 s (it stops once it is there): a busy machine can be slow to start it.
    const deadline = Date.now() + 20_000;
    while (!w.out().includes('ready') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const inside = descendants(w.sandbox.pid);
    expect(inside.length).toBeGreaterThan(1);
    const asked = Date.now();
    const end = await w.sandbox.stop('session_ended');
    expect(end).toMatchObject({ state: 'stopped', reason: 'session_ended', signal: 'SIGKILL' });
    expect(Date.now() - asked).toBeGreaterThanOrEqual(450);
    // Killed after its 500 ms grace, not left to its `sleep 1000`; the bound leaves room for a busy machine.
    expect(Date.now() - asked).toBeLessThan(10_000);
    // Ended means gone: no process of it runs once `stop` resolved.
    expect([w.sandbox.pid, ...inside].filter(alive)).toEqual([]);
  });

  it('is stopped when its processes hold more memory than its allowance', async () => {
    const hog = await run(['bash', '-c', 'x=$(head -c 200000000 /dev/zero | tr "\\0" a); sleep 30'], {
      limits: { ...LIMITS, memoryBytes: 64 * 1024 * 1024, logBytes: 1e4 },
    });
    expect(await hog.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'memory_limit' });
  });

  it('in its control group, one that grows faster than the watch looks is stopped by the kernel, and only it', async () => {
    const { place, problem } = cgroupPlace('');
    expect(problem).toBeNull();
    const limits = { ...LIMITS, memoryBytes: 10 * 1024 ** 3, logBytes: 1e4 };
    // The watch would allow 10 GiB; the control group allows 64 MiB (and a quarter... at least 64 MiB more): only
    // the kernel can stop it, at once.
    const cgroup = workloadCgroup(place!, `test-${Math.random().toString(36).slice(2, 8)}`, {
      memoryBytes: 64 * 1024 * 1024,
      processes: 64,
    });
    const neighbour = await run(['sleep', '30'], { limits });
    const hog = await run(
      ['sh', '-c', 'head -c 2000000000 /dev/zero | tail -c 2000000000 > /dev/null && echo survived'],
      {
        limits,
        cgroup,
      },
    );
    const started = Date.now();
    expect(await hog.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'memory_limit' });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(hog.out()).toBe('');
    // Its neighbour runs on.
    expect(alive(neighbour.sandbox.pid)).toBe(true);
    await neighbour.sandbox.stop('session_ended');
  });

  it('stops at its maximum runtime, and cuts its output at the log limit saying how much was cut', async () => {
    const w = await run(['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; sleep 100'], {
      spec: {
        command: ['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; sleep 100'],
        env: {},
        max_runtime_seconds: 1,
        network: false,
        inputs: [],
      },
    });
    expect(await w.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'max_runtime' });
    const out = w.out();
    expect(out.startsWith('a'.repeat(64 * 1024))).toBe(true);
    expect(out).toContain(`[output cut: ${100_000 - 64 * 1024} more bytes not kept]`);
  });

  it('dies with its daemon: a daemon killed with SIGKILL leaves no process of its workloads', async () => {
    const script = path.join(root, 'daemon.ts');
    const workDir = path.join(root, 'orphan');
    mkdirSync(workDir);
    const disk = { kind: 'watch', workDir, tmpDir: null, full: () => false, close: () => {} };
    writeFileSync(
      script,
      `import { startSandbox } from ${JSON.stringify(path.resolve('tools/provider-daemon/src/workloads/sandbox.ts'))};
const s = startSandbox({ spec: { command: ['sleep', '1000'], env: {}, max_runtime_seconds: 600, network: false, inputs: [] },
  disk: { ...${JSON.stringify(disk)}, full: () => false, close: () => {} }, logDir: ${JSON.stringify(workDir)},
  gpus: [], controlDevices: [], hidden: [],
  limits: { processes: 64, openFiles: 256, memoryBytes: 1e9, diskBytes: 1e7, diskFiles: 1e4, logBytes: 1e4 }, platformEnv: {},
  stopGraceMs: 500 });
console.log(s.pid);
setInterval(() => {}, 1000);`,
    );
    const daemon = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [line] = (await once(daemon.stdout!, 'data')) as [Buffer];
    const pid = Number(line.toString().trim());
    // Its workload's processes, once they run (a fixed pause could end before a busy machine started them).
    const running = Date.now() + 20_000;
    while (descendants(pid).length === 0 && Date.now() < running) await new Promise((r) => setTimeout(r, 50));
    const inside = [pid, ...descendants(pid)];
    expect(inside.length).toBeGreaterThan(1);
    daemon.kill('SIGKILL');
    const deadline = Date.now() + 20_000;
    while (inside.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(inside.filter(alive)).toEqual([]);
  });

  it('refuses a spec the platform does not accept, whatever reached the daemon', async () => {
    await expect(
      run(['true'], {
        spec: { command: ['true'], env: { LD_PRELOAD: '/x.so' }, max_runtime_seconds: 5, network: false, inputs: [] },
      }),
    ).rejects.toThrow(/LD_PRELOAD/);
    await expect(run([])).rejects.toThrow();
  });
});

describe('its disk: a filesystem of its own, bounded by the kernel', () => {
  const MiB = 1024 * 1024;
  /** The daemon's event loop's longest stall while `work` runs (ms). */
  async function loopStall<T>(work: () => Promise<T>): Promise<{ result: T; stallMs: number }> {
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    try {
      const result = await work();
      return { result, stallMs: h.max / 1e6 };
    } finally {
      h.disable();
    }
  }
  const limits = { ...LIMITS, diskBytes: 200 * MiB, diskFiles: 1_000_000, memoryBytes: 1024 * MiB };
  // 200,100 empty files (past any walk's cap), then 4 x 100 MB in a 200 MB allowance.
  const outrun = [
    'sh',
    '-c',
    'mkdir many && cd many && seq 1 200100 | xargs touch && cd .. && echo made && ' +
      'for i in 1 2 3 4; do head -c 100000000 /dev/zero > big$i || echo "write $i refused"; done; echo done',
  ];

  it.runIf(isRoot)(
    'ends a workload that makes 200,100 files and then writes 400 MB in a 200 MB allowance with disk_limit, no more than its allowance written, the daemon never stalled and its neighbour stopped at once',
    async () => {
      const neighbour = await run(['sleep', '1000']);
      await neighbour.sandbox.ready;
      const { result, stallMs } = await loopStall(async () => {
        const filler = await run(outrun, { limits });
        expect(filler.disk.kind).toBe('filesystem');
        // Once its files are made, the neighbour's stop is not held up by them.
        const deadline = Date.now() + 120_000;
        while (!filler.out().includes('made') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        const asked = Date.now();
        await neighbour.sandbox.stop('session_ended');
        const stopMs = Date.now() - asked;
        const end = await filler.sandbox.ended;
        // What its filesystem holds: never past the allowance.
        const fs = statfsSync(filler.workDir);
        return { end, stopMs, used: (fs.blocks - fs.bfree) * fs.bsize, out: filler.out(), err: filler.err() };
      });
      expect(result.end).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
      expect(result.out).toContain('made');
      expect(result.out).toMatch(/write [2-4] refused/);
      expect(result.err).toMatch(/No space left on device/);
      expect(result.used).toBeLessThanOrEqual(200 * MiB);
      // Bounds a busy machine keeps (its writeback, this process's own work); a walk of the files would take far
      // longer.
      expect(result.stopMs).toBeLessThan(5000);
      expect(stallMs).toBeLessThan(3000);
    },
    180_000,
  );

  it.runIf(isRoot)('counts its files too: past its file allowance it gets ENOSPC and ends disk_limit', async () => {
    const w = await run(['sh', '-c', 'mkdir d && cd d && seq 1 20000 | xargs touch; echo "exit $?"; ls | wc -l'], {
      limits: { ...LIMITS, diskFiles: 5000 },
    });
    expect(await w.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    expect(w.err()).toMatch(/No space left on device/);
    expect(Number(w.out().trim().split('\n').at(-1) ?? '0')).toBeLessThanOrEqual(5100);
  });

  it.runIf(isRoot)('holds its /tmp to the same allowance as its work directory', async () => {
    const w = await run([
      'sh',
      '-c',
      'head -c 12000000 /dev/zero > /tmp/a; head -c 12000000 /dev/zero > b; echo "exit $?"',
    ]);
    expect(await w.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    expect(w.out()).toMatch(/^exit [1-9]/);
    const fs = statfsSync(w.workDir);
    expect((fs.blocks - fs.bfree) * fs.bsize).toBeLessThanOrEqual(LIMITS.diskBytes);
  });

  it('without a filesystem of its own (not root, or turned off), the watch counts its files in a process of its own and never stalls the daemon', async () => {
    const { result, stallMs } = await loopStall(async () => {
      // It stays after its writes: what ends it is the watch finding it over, however long a busy machine makes
      // the count take, not a race with its own exit.
      const lingering = ['sh', '-c', `${outrun[2]}; sleep 600`];
      const filler = await run(lingering, { limits: { ...limits, diskFiles: 100_000 }, disk: 'watch' });
      expect(filler.disk.kind).toBe('watch');
      return filler.sandbox.ended;
    });
    expect(result).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    expect(stallMs).toBeLessThan(3000);
  }, 180_000);

  it('with the watch, counts its /tmp with its work directory: on the disk, never memory past any allowance', async () => {
    const filler = await run(
      ['sh', '-c', 'i=0; while true; do i=$((i+1)); head -c 4000000 /dev/zero > /tmp/f$i; sleep 0.1; done'],
      { disk: 'watch' },
    );
    expect(filler.disk.tmpDir).not.toBeNull();
    expect(await filler.sandbox.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
  }, 180_000);
});

describe('what a workload sees of the machine', () => {
  it('sees its own control group alone, none of the host network interfaces, and nothing of the daemon in its first process', async () => {
    const place = cgroupPlace('').place;
    const name = `see-${Math.random().toString(36).slice(2, 8)}`;
    const cgroup = place ? workloadCgroup(place, name, { memoryBytes: 256 * 1024 * 1024, processes: 64 }) : undefined;
    const neighbour = await run(
      ['sleep', '30'],
      cgroup ? { cgroup: workloadCgroup(place!, `${name}-n`, { memoryBytes: 256 * 1024 * 1024, processes: 64 }) } : {},
    );
    await neighbour.sandbox.ready;
    const w = await run(
      [
        'sh',
        '-c',
        'echo "cg:$(find /sys/fs/cgroup -maxdepth 2 -type d | sort | tr "\n" " ")"; ' +
          'echo "net:$(ls -A /sys/class/net /sys/devices/virtual/net/ 2>/dev/null | grep -v -e : -e "^$" | tr "\n" " ")"; ' +
          'echo "env:$(tr "\\0" " " < /proc/1/environ)"; echo "cmd:$(tr "\\0" " " < /proc/1/cmdline)"; ' +
          'echo "mounts:$(cut -d" " -f4 /proc/self/mountinfo | sort -u | tr "\n" " ")"; ' +
          'echo "block:$(cat /sys/block/*/loop/backing_file /sys/class/block/*/loop/backing_file ' +
          '/sys/devices/virtual/block/*/loop/backing_file 2>/dev/null | tr "\n" " ")"',
      ],
      cgroup ? { cgroup } : {},
    );
    expect(await w.sandbox.ended).toMatchObject({ state: 'exited', exitCode: 0 });
    await neighbour.sandbox.stop('session_ended');
    const said = Object.fromEntries(
      w
        .out()
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]),
    );
    // Its own control group's files (its memory, its processes), never another session's or the machine's.
    expect(said.cg).not.toContain('gpu-platform');
    expect(said.cg).not.toContain(`${name}-n`);
    if (cgroup) expect(said.cg).not.toBe('/sys/fs/cgroup');
    expect(said.net).toBe('');
    // bwrap, its first process: a fixed PATH, and no host path on its command line.
    expect(said.env).toBe('PATH=/usr/sbin:/usr/bin:/sbin:/bin');
    expect(said.cmd).toMatch(/^bwrap --args 5 -- sh -c /);
    // No mount inside shows where on the host its directories are (a simulated GPU's stand-in file aside).
    expect(said.mounts).not.toContain(path.dirname(w.logDir));
    // Nor a block device: the neighbour's disk image (a loop device, with a disk of its own) names its session.
    expect(said.block).toBe('');
  });
});

describe("a workload's log on a full disk", () => {
  it('is read to its end and dropped, never an error that takes the daemon down (/dev/full: ENOSPC)', async () => {
    const output = Readable.from(Array.from({ length: 200 }, () => Buffer.alloc(64 * 1024, 120)));
    await expect(boundedCopy(output, '/dev/full', 1024 * 1024)).resolves.toBeUndefined();
    expect(output.readableEnded).toBe(true);
  });
});

describe('a program that is not there', () => {
  it('is found missing (127) or not executable (126) in the view the sandbox will have, before anything starts', async () => {
    const dir = path.join(root, `cmd-${Math.random().toString(36).slice(2, 8)}`);
    mkdirSync(path.join(dir, 'inputs'), { recursive: true });
    const disk = await prepareDisk(dir, LIMITS, 'watch', null);
    sessions.push(dir);
    writeFileSync(path.join(disk.workDir, 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    writeFileSync(path.join(dir, 'inputs', 'train.py'), 'print(1)\n', { mode: 0o444 });
    const view = sandboxView({ disk, inputsDir: path.join(dir, 'inputs') });
    const problem = (program: string) =>
      commandProblem(program, view, { path: SANDBOX_PATH, cwd: '/work', uid: isRoot ? 200_000 : null });
    expect(problem('sh')).toBeNull();
    expect(problem('/bin/sh')).toBeNull();
    expect(problem('./run.sh')).toBeNull();
    expect(problem('/work/run.sh')).toBeNull();
    expect(problem('no-such-program')).toBe('command_not_found');
    expect(problem('/usr/bin/no-such-program')).toBe('command_not_found');
    // The host's files outside the view are not there for it.
    expect(problem(process.execPath)).toBe(process.execPath.startsWith('/usr/') ? null : 'command_not_found');
    expect(problem('/work/inputs/train.py')).toBe('command_not_executable');
    expect(problem('/etc')).toBe('command_not_executable');
  });
});

describe("a real machine's GPU device nodes", () => {
  it("binds each GPU's node by the driver's minor number, not nvidia-smi's index", () => {
    const proc = path.join(root, 'proc-gpus');
    // nvidia-smi orders by PCI bus; the driver numbered these two the other way round.
    for (const [bus, minor] of [
      ['0000:3b:00.0', 1],
      ['0000:86:00.0', 0],
    ] as const) {
      mkdirSync(path.join(proc, bus), { recursive: true });
      writeFileSync(path.join(proc, bus, 'information'), `Model: NVIDIA H100\nDevice Minor: ${minor}\n`);
    }
    const gpus = [
      { ...readings[0]!, index: 0, pciBusId: '00000000:3B:00.0' },
      { ...readings[1]!, index: 1, pciBusId: '00000000:86:00.0' },
      { ...readings[2]!, index: 2, pciBusId: null },
    ];
    expect([...nvidiaDevices(gpus, proc)]).toEqual([
      [0, '/dev/nvidia1'],
      [1, '/dev/nvidia0'],
      [2, '/dev/nvidia2'],
    ]);
    expect(controlDevices(root)).toEqual([]);
  });
});
