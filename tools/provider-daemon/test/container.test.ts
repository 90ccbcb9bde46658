/**
 * Container mode against the real Podman (Debian's, installed by the test setup with a busybox image made there) on a
 * simulated 4-GPU machine: every check is real except the GPU. A container runs its image with the argv as given,
 * sees only the GPUs it leased, writes only its work directory, reaches no network, and is stopped at its limits, its
 * maximum runtime and its end; a container an earlier life of the daemon left is found by its label and removed.
 */
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import type { WorkloadSpec } from '@gpu/common';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { daemonConfigSchema } from '../src/config.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { drained, startExec } from '../src/reach/exec.ts';
import {
  type ContainerOptions,
  DAEMON_LABEL,
  imageRefused,
  removeOrphans,
  startContainer,
} from '../src/workloads/container.ts';
import { simulatedDevices } from '../src/workloads/devices.ts';
import { prepareDisk, releaseDisk } from '../src/workloads/disk.ts';
import { entryCommand } from '../src/workloads/entry.ts';
import { running as alive } from '../src/workloads/processes.ts';
import { testImage, testRuntimeArgs } from './support/containers.ts';

const image = testImage;
const runtime = { path: 'podman', args: testRuntimeArgs };

const root = mkdtempSync(path.join(tmpdir(), 'container-test-'));
/** The daemon's directory for the variables' files of programs run in workloads. */
const reachDir = path.join(root, '.reach');
chmodSync(root, 0o711);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const isRoot = process.getuid?.() === 0;
let nextUid = 210_000 + Math.floor(Math.random() * 10_000) * 10;
const machine = daemonConfigSchema.parse({
  gpu: { source: 'simulated', simulated_gpus: Array.from({ length: 4 }, () => ({ name: 'H', memory_total_mib: 1 })) },
});
const readings = await gpuSource(machine.gpu).read();
const devices = simulatedDevices(path.join(root, 'dev'), readings);

/** The containers this file's daemon (its run directory, `root`) made that the runtime has. */
const labelled = () =>
  spawnSync(
    'podman',
    [...runtime.args, 'ps', '--all', '--filter', `label=${DAEMON_LABEL}=${root}`, '--format', '{{.Names}}'],
    {
      encoding: 'utf8',
    },
  )
    .stdout.split('\n')
    .filter(Boolean);

/** The limits of the tests' containers. */
const LIMITS = {
  processes: 64,
  openFiles: 256,
  memoryBytes: 256 * 1024 * 1024,
  diskBytes: 1e7,
  diskFiles: 5000,
  logBytes: 1e5,
};
/** The sessions' directories whose disks are released at the end. */
const sessions: string[] = [];
afterAll(async () => {
  for (const dir of sessions) await releaseDisk(dir);
});

async function run(
  spec: Partial<WorkloadSpec>,
  over: Partial<Omit<ContainerOptions, 'disk'>> & { leased?: number[] } = {},
) {
  const sessionId = `t${Math.random().toString(36).slice(2, 10)}`;
  const dir = path.join(root, sessionId);
  const logDir = path.join(dir, 'logs');
  mkdirSync(logDir, { recursive: true });
  chmodSync(dir, 0o711);
  const uid = isRoot ? nextUid++ : undefined;
  const limits = over.limits ?? LIMITS;
  // As the runner makes it: a filesystem of its own (a root daemon), its output directory the workload's.
  const disk = await prepareDisk(dir, limits, isRoot ? 'filesystem' : 'watch', uid ?? null);
  sessions.push(dir);
  const workDir = disk.workDir;
  mkdirSync(path.join(workDir, 'output'));
  if (uid !== undefined) chownSync(path.join(workDir, 'output'), uid, uid);
  if (disk.tmpDir) chmodSync(disk.tmpDir, 0o1777);
  const { leased = [0], ...rest } = over;
  const container = startContainer({
    spec: { image, env: {}, max_runtime_seconds: 60, network: false, inputs: [], ...spec },
    sessionId,
    daemon: root,
    disk,
    logDir,
    gpus: leased.map((i) => ({ index: i, uuid: readings[i]!.uuid, device: devices.get(i)! })),
    simulated: true,
    controlDevices: [],
    limits,
    ...(uid !== undefined ? { uid } : {}),
    platformEnv: { GPU_PLATFORM_SESSION_ID: sessionId },
    stopGraceMs: 1000,
    runtime,
    ...rest,
  });
  return {
    container,
    sessionId,
    workDir,
    logDir,
    uid,
    stdout: () => readFileSync(path.join(logDir, 'stdout.log'), 'utf8'),
    stderr: () => readFileSync(path.join(logDir, 'stderr.log'), 'utf8'),
  };
}

/** A TCP service of the host on all its addresses, and the host's own (non-loopback) IPv4 address. */
async function hostService() {
  const server = createServer((s) => s.end('secret\n'));
  await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
  const port = (server.address() as { port: number }).port;
  const host = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
  return { server, port, host };
}

describe('container mode', () => {
  it('runs the argv as given on exactly the leased GPUs, its root read-only and its work directory its own', async () => {
    const script = [
      'echo "argv: $0 $1"',
      'echo "env: $GREETING $GPU_PLATFORM_SESSION_ID $CUDA_VISIBLE_DEVICES"',
      'ls /dev | grep nvidia',
      'cat /dev/nvidia1',
      'id -u',
      'touch /etc/escape 2>/dev/null || echo "root is read-only"',
      // The image declares a volume: it gets none (no writable place on the host's disk outside the limits).
      'touch /data/escape 2>/dev/null || echo "no volume"',
      // The daemon's proxy variables (and credentials) stay the daemon's.
      'env | grep -i proxy || echo "no proxy"',
      'echo done > /work/output/result.txt',
      'echo "to stderr" >&2',
      'exit 3',
    ].join('\n');
    // The daemon's environment has a proxy with credentials in it.
    process.env.HTTPS_PROXY = 'http://daemon:secret@proxy.example:3128';
    const w = await run(
      { command: ['/bin/busybox', 'sh', '-c', script, 'zero', 'one; $(whoami)'], env: { GREETING: 'hello world' } },
      { leased: [1, 3] },
    );
    const end = await w.container.ended;
    delete process.env.HTTPS_PROXY;
    expect(end).toMatchObject({ state: 'exited', exitCode: 3 });
    const out = w.stdout();
    // The argv reaches the program as given: no shell ran the renter's words.
    expect(out).toContain('argv: zero one; $(whoami)\n');
    expect(out).toContain(`env: hello world ${w.sessionId} GPU-simulated-1,GPU-simulated-3`);
    expect(out.match(/^nvidia\d+$/gm)).toEqual(['nvidia1', 'nvidia3']);
    expect(out).toContain('simulated GPU 1 GPU-simulated-1');
    if (w.uid !== undefined) expect(out).toContain(`\n${w.uid}\n`);
    expect(out).toContain('root is read-only');
    expect(out).toContain('no volume');
    expect(out).toContain('no proxy');
    expect(w.stderr()).toBe('to stderr\n');
    const result = path.join(w.workDir, 'output', 'result.txt');
    expect(readFileSync(result, 'utf8')).toBe('done\n');
    if (w.uid !== undefined) expect(statSync(result).uid).toBe(w.uid);
    // Its container is gone with it.
    expect(labelled()).not.toContain(`gpu-session-${w.sessionId}`);
  });

  it('keeps each variable whole, off the command line: a quote or a line break in a value sets no other one', async () => {
    // A container's own variables are one line each (the schema refuses others); a quote starts a value as any other.
    const env = { QUOTED: '"q"', PLAIN: 'a b' };
    const show =
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's own expansion
      'printf "%s|%s|%s|%s|%s\\n" "$QUOTED" "$PLAIN" "$MULTI" "${INJECTED:-none}" "${XDG_RUNTIME_DIR:-none}"';
    const w = await run({ command: ['/bin/busybox', 'sh', '-c', `${show}; exec sleep 60`], env });
    await w.container.ready;
    await vi.waitFor(() => expect(w.stdout()).toBe('"q"|a b||none|none\n'), { timeout: 20_000 });
    // A program run in it (`gpu exec`) may be given any value.
    const execEnv = { ...env, MULTI: 'one\nINJECTED=yes\nXDG_RUNTIME_DIR' };
    const argv = ['/bin/busybox', 'sh', '-c', show];
    const command = entryCommand(w.container.entry, { argv, env: execEnv, tty: false }, reachDir);
    expect(command.args.join(' ')).not.toContain('PLAIN=');
    const proc = startExec(command, null);
    const out: Buffer[] = [];
    proc.stdout.on('data', (d: Buffer) => out.push(d));
    proc.stdin.end();
    expect(await proc.ended).toMatchObject({ code: 0 });
    await drained(proc.stdout);
    expect(Buffer.concat(out).toString()).toBe('"q"|a b|one\nINJECTED=yes\nXDG_RUNTIME_DIR|none|none\n');
    // Its file of variables is gone.
    expect(readdirSync(reachDir)).toEqual([]);
    await w.container.stop('session_ended');
  });

  it('reaches no network: only its loopback, never a service of the host', async () => {
    const { server, port, host } = await hostService();
    try {
      const w = await run({
        command: [
          '/bin/busybox',
          'sh',
          '-c',
          `ls /sys/class/net; nc -w 2 ${host ?? '10.0.2.2'} ${port} && echo REACHED; nc -w 2 10.0.2.2 ${port} && echo REACHED; true`,
        ],
      });
      expect(await w.container.ended).toMatchObject({ state: 'exited', exitCode: 0 });
      expect(w.stdout()).toBe('lo\n');
    } finally {
      server.close();
    }
  });

  it('with the network allowed, goes out through slirp4netns and never reaches the host or a private range', async () => {
    const { server, port, host } = await hostService();
    try {
      const w = await run({
        network: true,
        command: [
          '/bin/busybox',
          'sh',
          '-c',
          [
            'ls /sys/class/net',
            // The host's loopback (slirp's 10.0.2.2), its own address, and a private range.
            `nc -w 2 10.0.2.2 ${port} && echo REACHED-LOOPBACK`,
            `nc -w 2 ${host} ${port} && echo REACHED-HOST`,
            `nc -w 2 192.168.1.1 ${port} && echo REACHED-PRIVATE`,
            // IPv4 alone, which the fence covers.
            'grep tap0 /proc/net/if_inet6 | grep -qv ^fe80 && echo IPV6-ON',
            'true',
          ].join('; '),
        ],
      });
      expect(await w.container.ended).toMatchObject({ state: 'exited', exitCode: 0 });
      expect(w.stdout()).toBe('lo\ntap0\n');
    } finally {
      server.close();
    }
  });

  it('is stopped past its memory allowance, and its processes past their limit cannot fork', async () => {
    const hog = await run(
      {
        command: [
          '/bin/busybox',
          'sh',
          '-c',
          's=$(head -c 4000000 /dev/zero | tr "\\0" a); i=0; while :; do eval "v$i=\\$s"; i=$((i+1)); sleep 0.1; done',
        ],
      },
      { limits: { ...LIMITS, memoryBytes: 64 * 1024 * 1024, logBytes: 1e4 } },
    );
    const bomb = await run(
      { command: ['/bin/busybox', 'sh', '-c', 'n=0; for i in $(seq 60); do sleep 30 & n=$((n+1)); done; echo ok'] },
      { limits: { ...LIMITS, processes: 16, memoryBytes: 1e9, logBytes: 1e4 } },
    );
    expect(await hog.container.ended).toMatchObject({ state: 'stopped', reason: 'memory_limit' });
    // The fork bomb hit its limit: its shell could not fork the rest, and gave up.
    expect(await bomb.container.ended).toMatchObject({ state: 'exited', exitCode: 2 });
    expect(bomb.stderr()).toMatch(/can't fork/);
    expect(bomb.stdout()).toBe('');
  });

  it("one the kernel kills for memory ends at its memory limit, and the runtime's marker stays in its session's directory", {
    timeout: 120_000,
  }, async () => {
    // conmon creates an empty `oom` file in its working directory when the kernel kills the container for memory: it
    // once landed at the root of the checkout the tests ran in (the daemon's working directory), and was committed.
    const daemonCwd = path.join(process.cwd(), 'oom');
    // One read into a 300 MB buffer: past the kernel's limit (a quarter above the allowance, at least 64 MiB more) at
    // once, long before the watch looks. On a busy machine the buffer fills slowly, and the daemon's own watch (each
    // second, at the allowance) may stop it first: no kill by the kernel, no marker. Its end is the same; the marker's
    // place is looked at on the first run the kernel killed (three at most).
    let marked = false;
    for (let tries = 0; tries < 3 && !marked; tries++) {
      const hog = await run(
        { command: ['/bin/busybox', 'dd', 'if=/dev/zero', 'of=/dev/null', 'bs=300M', 'count=1'] },
        { limits: { ...LIMITS, memoryBytes: 64 * 1024 * 1024, logBytes: 1e4 } },
      );
      // Its end says why: its memory allowance, not an exit of its own (on Podman 4.3 the runtime's state does not say
      // so, the marker does).
      expect(await hog.container.ended).toMatchObject({ state: 'stopped', reason: 'memory_limit' });
      // Written by the runtime's monitor as it hears of the kill, which on a busy machine may come after the runtime
      // itself reported the container killed for memory (then the end did not wait for it).
      const marker = path.join(hog.logDir, 'oom');
      marked = await vi
        .waitFor(() => expect(existsSync(marker)).toBe(true), { timeout: 10_000, interval: 100 })
        .then(() => true)
        .catch(() => false);
      expect(existsSync(daemonCwd), `${daemonCwd}: the runtime wrote into the daemon's working directory`).toBe(false);
    }
    expect(marked, "the kernel's kill left its marker in the session's directory").toBe(true);
  });

  it('is stopped when it fills its disk allowance, and one file cannot pass it either', async () => {
    const limits = { ...LIMITS, diskBytes: 10_000_000, logBytes: 1e4 };
    // One file past the allowance: the kernel refuses the write (its filesystem is full; RLIMIT_FSIZE besides), and
    // the workload that ended on it ended at its limit.
    const big = await run(
      { command: ['/bin/busybox', 'sh', '-c', 'head -c 20000000 /dev/zero > /work/big || echo refused'] },
      { limits },
    );
    expect(await big.container.ended).toMatchObject(
      isRoot ? { state: 'stopped', reason: 'disk_limit' } : { state: 'exited' },
    );
    expect(big.stdout()).toContain('refused');
    expect(statSync(path.join(big.workDir, 'big')).size).toBeLessThanOrEqual(10_000_000);
    // Files under it each, past it together: the kernel refuses the rest, the watch stops it.
    const many = await run(
      {
        command: [
          '/bin/busybox',
          'sh',
          '-c',
          'for i in 1 2 3 4; do head -c 4000000 /dev/zero > /work/f$i; done; sleep 30',
        ],
      },
      { limits },
    );
    expect(await many.container.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
  });

  it('is stopped at its end even when it ignores SIGTERM (SIGKILL after the grace period), no process left', async () => {
    const w = await run({
      command: ['/bin/busybox', 'sh', '-c', 'trap "" TERM; echo started; while :; do sleep 1; done'],
    });
    await w.container.ready;
    // Once it says so its trap is set (a fixed pause could end first on a busy machine, and SIGTERM end it at once).
    const deadline = Date.now() + 20_000;
    while (!w.stdout().includes('started') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const pid = w.container.pid;
    expect(alive(pid)).toBe(true);
    const asked = Date.now();
    expect(await w.container.stop('session_ended')).toMatchObject({ state: 'stopped', reason: 'session_ended' });
    // The grace period (1 s), then SIGKILL (the bound leaves room for a busy machine's podman calls).
    expect(Date.now() - asked).toBeGreaterThanOrEqual(900);
    expect(Date.now() - asked).toBeLessThan(20_000);
    expect(alive(pid)).toBe(false);
    expect(labelled()).not.toContain(`gpu-session-${w.sessionId}`);
  });

  it('a program that is its first process still gets SIGTERM at a stop, and ends without the grace period', async () => {
    // A grace period far past what a busy machine can make a stop take: a stop within half of it did not wait it out.
    const w = await run({ command: ['/bin/busybox', 'sleep', '100'] }, { stopGraceMs: 40_000 });
    await w.container.ready;
    const asked = Date.now();
    expect(await w.container.stop('session_ended')).toMatchObject({ state: 'stopped', reason: 'session_ended' });
    expect(Date.now() - asked).toBeLessThan(20_000);
  });

  it('stops at its maximum runtime', async () => {
    const w = await run({ command: ['/bin/busybox', 'sleep', '100'], max_runtime_seconds: 1 });
    expect(await w.container.ended).toMatchObject({ state: 'stopped', reason: 'max_runtime' });
  });

  it('a container an earlier life of the daemon left is found by its label and removed, its processes with it', async () => {
    const w = await run({ command: ['/bin/busybox', 'sleep', '100'] });
    await w.container.ready;
    await new Promise((r) => setTimeout(r, 300));
    const pid = w.container.pid;
    // As a daemon started again finds it. (This one, still watching, sees it killed or removed under it: its end
    // settles either way; a real earlier life is gone and says nothing.)
    expect(await removeOrphans(runtime, root)).toEqual([w.sessionId]);
    const end = await w.container.ended;
    expect(end.state === 'exited' ? end.exitCode : end.state === 'stopped' ? end.reason : end).toBeOneOf([
      137,
      'container_removed',
    ]);
    expect(alive(pid)).toBe(false);
    expect(labelled()).toEqual([]);
  });

  it('a stop the moment it started runs nothing of it, and leaves nothing', async () => {
    const w = await run({ command: ['/bin/busybox', 'sh', '-c', 'echo ran > /work/output/ran; sleep 100'] });
    expect(await w.container.stop('session_ended')).toMatchObject({ state: 'stopped', reason: 'session_ended' });
    await new Promise((r) => setTimeout(r, 500));
    expect(existsSync(path.join(w.workDir, 'output', 'ran'))).toBe(false);
    expect(labelled()).not.toContain(`gpu-session-${w.sessionId}`);
  });

  it("an image's program that is not there never starts: failed, the renter's mistake, never billed", async () => {
    const w = await run({ command: ['/no/such/program'] });
    // Looked up in its image and volumes before it starts (a root daemon); elsewhere its init says why.
    const end = await w.container.ended;
    if (isRoot) expect(end).toMatchObject({ state: 'failed', reason: 'command_not_found' });
    else expect(end.state === 'exited' && end.exitCode).not.toBe(0);
    const found = await run({ command: ['busybox', 'true'] });
    expect(await found.container.ended).toMatchObject({ state: 'exited', exitCode: 0 });
  });

  it.runIf(isRoot)('holds its files and its /tmp to the same allowance, in a filesystem of its own', async () => {
    const files = await run(
      { command: ['/bin/busybox', 'sh', '-c', 'mkdir /work/d && cd /work/d && seq 1 20000 | xargs touch; ls | wc -l'] },
      { limits: { ...LIMITS, diskFiles: 2000 } },
    );
    expect(await files.container.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    expect(Number(files.stdout().trim())).toBeLessThanOrEqual(2100);
    const tmp = await run({
      command: [
        '/bin/busybox',
        'sh',
        '-c',
        'head -c 6000000 /dev/zero > /tmp/a; head -c 6000000 /dev/zero > /work/b || echo refused',
      ],
    });
    expect(await tmp.container.ended).toMatchObject({ state: 'stopped', reason: 'disk_limit' });
    expect(tmp.stdout()).toContain('refused');
  });

  it('sees its own control group and network alone, as the runtime makes them', async () => {
    const w = await run({
      command: [
        '/bin/busybox',
        'sh',
        '-c',
        'ls /sys/fs/cgroup | grep -c gpu-platform; ls /sys/class/net; cat /proc/1/environ | tr "\\0" "\\n" | grep -c "^PATH=/usr/sbin:/usr/bin:/sbin:/bin$"',
      ],
    });
    expect(await w.container.ended).toMatchObject({ state: 'exited' });
    const lines = w.stdout().trim().split('\n');
    // No other session's group; only its own loopback; its init's environment is its own, never the daemon's.
    expect(lines[0]).toBe('0');
    expect(lines.slice(1, -1)).toEqual(['lo']);
  });

  it('pulls from registries by name, never by address or from the machine itself unless allowed', () => {
    for (const ok of ['busybox', 'library/busybox:1', 'ghcr.io/org/app:v1', 'registry.example:5000/x/y'])
      expect(imageRefused(ok, []), ok).toBeNull();
    for (const refused of ['localhost/x:1', 'localhost:5000/x', '10.0.0.5:5000/x', '127.0.0.1/x', 'a.localhost/x'])
      expect(imageRefused(refused, []), refused).toMatch(/does not pull from/);
    expect(imageRefused('localhost/x:1', ['localhost'])).toBeNull();
    expect(imageRefused('10.0.0.5:5000/x', ['10.0.0.5:5000'])).toBeNull();
  });

  it('refuses a spec without an image (that is the sandbox)', async () => {
    await expect(run({ image: undefined, command: ['true'] })).rejects.toThrow(/runs in the sandbox/);
  });
});
