/**
 * Entering a running workload (`gpu exec`, `gpu shell`), against the real bubblewrap and nsenter: the renter's program
 * runs in the workload's own namespaces, as its user, with its variables (and nothing of the daemon's), under its
 * limits; with a terminal, its size follows the renter's window and Ctrl-C reaches its program.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type ExecProcess, startExec } from '../src/reach/exec.ts';
import { prepareDisk, releaseDisk } from '../src/workloads/disk.ts';
import { entryCommand, NAMESPACES_OF, shellAssignments } from '../src/workloads/entry.ts';
import { pidWhileRunning, processRef } from '../src/workloads/processes.ts';
import { IDLE_COMMAND } from '../src/workloads/runner.ts';
import { type Sandbox, startSandbox } from '../src/workloads/sandbox.ts';
import { execIn, programStarted, SANDBOX_LIMITS, simulatedMachine } from './support/sandbox-fixtures.ts';

const root = mkdtempSync(path.join(tmpdir(), 'entry-test-'));
chmodSync(root, 0o711);
const sessions: string[] = [];
const sandboxes: Sandbox[] = [];
const others: ChildProcess[] = [];
afterAll(async () => {
  for (const p of others) p.kill('SIGKILL');
  await Promise.all(sandboxes.map((s) => s.stop('test over')));
  for (const dir of sessions) await releaseDisk(dir);
  rmSync(root, { recursive: true, force: true });
});

const isRoot = process.getuid?.() === 0;
const { readings, devices } = await simulatedMachine(root);
/** A file of the daemon's, which no entered program may read. */
const secretDir = path.join(root, 'daemon');
mkdirSync(secretDir);
writeFileSync(path.join(secretDir, 'credentials.json'), '{"client_secret":"s3cr3t"}', { mode: 0o600 });
const reachDir = path.join(root, '.reach');

/** An idle workload, as the runner starts one. */
async function idleWorkload(env: Record<string, string> = {}) {
  const name = `s-${Math.random().toString(36).slice(2, 8)}`;
  const dir = path.join(root, name);
  const logDir = path.join(dir, 'logs');
  mkdirSync(logDir, { recursive: true });
  chmodSync(dir, 0o711);
  const uid = isRoot ? 210_000 + Math.floor(Math.random() * 10_000) : undefined;
  const limits = SANDBOX_LIMITS;
  const disk = await prepareDisk(dir, limits, isRoot ? 'filesystem' : 'watch', uid ?? null);
  sessions.push(dir);
  const sandbox = startSandbox({
    spec: { command: [...IDLE_COMMAND], env, max_runtime_seconds: 120, network: false, inputs: [] },
    disk,
    logDir,
    gpus: [{ uuid: readings[0]!.uuid, device: devices.get(0)! }],
    controlDevices: [],
    limits,
    uid,
    hidden: [],
    platformEnv: { GPU_PLATFORM_SESSION_ID: name },
    stopGraceMs: 500,
  });
  sandboxes.push(sandbox);
  await sandbox.ready;
  // Its program starts just after the sandbox is set up.
  await programStarted(sandbox.entry);
  writeFileSync(path.join(disk.workDir, 'notes.txt'), "the renter's\n");
  return { sandbox, uid, name };
}

/** What `read` gives once it gives something (5 s at most). */
async function until<T>(read: () => T | null): Promise<T> {
  for (let i = 0; i < 500; i++) {
    try {
      const value = read();
      if (value !== null) return value;
    } catch {}
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('never');
}

/** Runs argv in the workload with pipes; its output, errors and end. */
const exec = (sandbox: Sandbox, argv: string[], input = '') => execIn(sandbox.entry, argv, reachDir, input);

/** Waits until the terminal's output so far matches. */
async function screen(output: () => string, pattern: RegExp, ms = 20_000): Promise<string> {
  const deadline = Date.now() + ms;
  while (!pattern.test(output())) {
    if (Date.now() > deadline) throw new Error(`the terminal never showed ${pattern}: ${JSON.stringify(output())}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return output();
}

describe('a program entering a running workload', () => {
  it("runs in the workload's view, as its user, with its variables and exit code, reading its input", async () => {
    const w = await idleWorkload({ SECRET_TOKEN: 'tok-7c1e', QUOTE: 'it\'s "quoted" $HOME `id`' });
    process.env.DAEMON_ONLY_VARIABLE = 'daemon-secret';
    const r = await exec(
      w.sandbox,
      [
        'sh',
        '-c',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, run by the shell
        'echo "uid=$(id -u) host=$(hostname) pwd=$(pwd)"; echo "$SECRET_TOKEN|$QUOTE|$HOME|${DAEMON_ONLY_VARIABLE:-none}"; ' +
          'echo "gpus=$CUDA_VISIBLE_DEVICES session=$GPU_PLATFORM_SESSION_ID"; cat; ls /work; exit 7',
      ],
      'from stdin\n',
    );
    delete process.env.DAEMON_ONLY_VARIABLE;
    expect(r.code).toBe(7);
    const lines = r.out.split('\n');
    expect(lines[0]).toBe(`uid=${w.uid ?? process.getuid?.()} host=workload pwd=/work`);
    expect(lines[1]).toBe(`tok-7c1e|it's "quoted" $HOME \`id\`|/work|none`);
    expect(lines[2]).toBe(`gpus=${readings[0]!.uuid} session=${w.name}`);
    expect(lines[3]).toBe('from stdin');
    expect(lines).toContain('notes.txt');
    // The variables' file is gone from the daemon's directory once read.
    expect((await import('node:fs')).readdirSync(reachDir).filter((f) => f.startsWith('env-'))).toEqual([]);
  });

  it("sees the workload's processes alone, not the machine's files, devices or network", async () => {
    const w = await idleWorkload();
    const r = await exec(w.sandbox, [
      'sh',
      '-c',
      `ps -eo args= 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; ` +
        `cat ${path.join(secretDir, 'credentials.json')} 2>&1; ls /sys/class/net | wc -l; ls /dev | grep -c nvidia`,
    ]);
    expect(r.code).toBe(0);
    // Its own sleep is there; the daemon (this test's node) is not.
    expect(r.out).toMatch(/sleep infinity/);
    expect(r.out).not.toMatch(/vitest|node /);
    expect(r.out).not.toContain('s3cr3t');
    expect(r.out).toMatch(/No such file/);
    const [net, gpus] = r.out.trim().split('\n').slice(-2).map(Number);
    expect(net).toBe(0);
    expect(gpus).toBe(1);
  });

  it("keeps the root as the machine made it: no loader of the workload's for what enters it, nothing privileged", async () => {
    const w = await idleWorkload();
    // The workload's user (as the workload itself) cannot swap the links to /usr or put a file in its root: a
    // program entering starts from that root (its dynamic loader at /lib64).
    const r = await exec(w.sandbox, [
      'sh',
      '-c',
      'rm -f /lib64 2>&1; mkdir /lib64.own 2>&1; echo planted 2>&1 > /ld.so; readlink /lib64',
    ]);
    expect(r.out.match(/Read-only file system/g)).toHaveLength(3);
    expect(r.out.trim().split('\n').at(-1)).toBe('usr/lib64');
    // What enters holds no capability, gains none, and has no group of root's.
    const status = await exec(w.sandbox, [
      'grep',
      '-E',
      '^(Groups|CapPrm|CapEff|CapAmb|NoNewPrivs):',
      '/proc/self/status',
    ]);
    const fields = Object.fromEntries(
      status.out
        .trim()
        .split('\n')
        .map((l) => l.split(':').map((v) => v.trim())),
    );
    expect(fields).toMatchObject({
      CapPrm: '0000000000000000',
      CapEff: '0000000000000000',
      CapAmb: '0000000000000000',
      NoNewPrivs: '1',
    });
    expect(fields.Groups?.split(' ')).not.toContain('0');
  });

  it('ends when the workload ends: entering a stopped workload is refused', async () => {
    const w = await idleWorkload();
    const proc = startExec(entryCommand(w.sandbox.entry, { argv: ['sleep', '60'], tty: false }, reachDir), null);
    proc.stdin.end();
    await new Promise((r) => setTimeout(r, 300));
    await w.sandbox.stop('session_ended');
    const end = await Promise.race([proc.ended, new Promise((r) => setTimeout(() => r('still running'), 5000))]);
    expect(end).not.toBe('still running');
    expect(() => entryCommand(w.sandbox.entry, { argv: ['true'], tty: false }, reachDir)).toThrow(/not set up/);
  });

  it("never enters whatever process the kernel gave the workload's PID once it ended", async () => {
    const w = await idleWorkload();
    const init = w.sandbox.entry.process()!.pid;
    // A workload's first process as the daemon knows it: gone, and its PID given again, it is no longer that process.
    expect(pidWhileRunning(processRef(init))).toBe(init);
    expect(pidWhileRunning({ pid: init, start: '1' })).toBeNull();
    // The entry's own check, the last thing before nsenter opens the PID's namespaces: a process under that PID that
    // started at another time is refused (here, the workload's first process with another start time told).
    const command = entryCommand(w.sandbox.entry, { argv: ['id', '-u'], tty: false }, reachDir);
    const at = command.args.indexOf(String(init));
    expect(command.args[at + 1]).toBe(processRef(init)!.start);
    const reused = { ...command, args: command.args.map((a, i) => (i === at + 1 ? `${a}9` : a)) };
    const proc = startExec(reused, null);
    const err: Buffer[] = [];
    const out: Buffer[] = [];
    proc.stderr?.on('data', (d: Buffer) => err.push(d));
    proc.stdout.on('data', (d: Buffer) => out.push(d));
    proc.stdin.end();
    expect(await proc.ended).toMatchObject({ code: 126 });
    expect(Buffer.concat(err).toString()).toBe('gpu: the workload has ended\n');
    expect(Buffer.concat(out).toString()).toBe('');
    // With the start it has, the same command enters.
    expect(await exec(w.sandbox, ['id', '-u'])).toMatchObject({ code: 0, out: `${w.uid}\n` });
  });

  it('gives a terminal: its size, a resize, Ctrl-C to the foreground program, the shell exit status', async () => {
    const w = await idleWorkload();
    const proc: ExecProcess = startExec(
      entryCommand(w.sandbox.entry, { argv: ['bash', '--norc', '-i'], env: { TERM: 'xterm' }, tty: true }, reachDir),
      { cols: 101, rows: 33 },
    );
    let seen = '';
    proc.stdout.on('data', (d: Buffer) => {
      seen += String(d);
    });
    proc.stdin.write('stty size\n');
    await screen(() => seen, /33 101/);
    proc.resize(120, 40);
    proc.stdin.write('stty size\n');
    await screen(() => seen, /40 120/);
    // Ctrl-C ends the foreground program, not the shell.
    proc.stdin.write('sleep 30; echo after-$((1+1))\n');
    await new Promise((r) => setTimeout(r, 500));
    proc.stdin.write('\x03');
    proc.stdin.write('echo still-$((40+2))\n');
    // (The terminal echoes what is typed: the shell's arithmetic tells its output from the echo.)
    await screen(() => seen, /still-42/);
    expect(seen).not.toMatch(/after-2/);
    proc.stdin.write('exit 4\n');
    expect(await proc.ended).toEqual({ code: 4, signal: null });
  });
});

describe('the variables file', () => {
  it('quotes every value for the shell that reads it, and leaves out names a shell cannot set', () => {
    expect(shellAssignments({ A: "x'y", B: '$(id)', 'BAD-NAME': 'v' })).toBe("A='x'\\''y'\nB='$(id)'\n");
  });
});

describe("the workload's namespaces, held while its PID is known to be its own (NAMESPACES_OF)", () => {
  /** Runs `argv` through the script, for the process `pid` said to have started at `start`. */
  const through = (pid: number, start: string, argv: string[]) =>
    spawnSync('perl', ['-e', NAMESPACES_OF, String(pid), start, ...argv], { encoding: 'utf8' });
  const held = ['sh', '-c', 'readlink /proc/self/fd/4 /proc/self/fd/5'];

  it("gives the command the process's network namespace as descriptor 5, and the user namespace owning it as 4", async () => {
    const own = through(process.pid, processRef(process.pid)!.start, held);
    expect(own).toMatchObject({
      status: 0,
      stdout: `${readlinkSync('/proc/self/ns/user')}\n${readlinkSync('/proc/self/ns/net')}\n`,
    });
    // A sandbox's: not the user namespace its processes are in (bubblewrap nested that one), the one it was made in.
    const w = await idleWorkload();
    const init = w.sandbox.entry.process()!.pid;
    const sandbox = through(init, processRef(init)!.start, held);
    expect(sandbox.status).toBe(0);
    const [owner, net] = sandbox.stdout.trim().split('\n');
    expect(owner).toMatch(/^user:\[\d+\]$/);
    expect(owner).not.toBe(readlinkSync(`/proc/${init}/ns/user`));
    expect(owner).not.toBe(readlinkSync('/proc/self/ns/user'));
    expect(net).toBe(readlinkSync(`/proc/${init}/ns/net`));
  });

  it("keeps descriptor 3 (the variables, a forwarder's channel), wherever its own were opened", () => {
    // Descriptor 3 taken, the script's own namespaces open on 4 and 5 first: each is moved without closing the other.
    const r = spawnSync(
      'sh',
      [
        '-c',
        'exec 3</etc/hostname; exec "$@"',
        'sh',
        ...['perl', '-e', NAMESPACES_OF, String(process.pid), processRef(process.pid)!.start],
        ...['sh', '-c', 'cat <&3; readlink /proc/self/fd/4 /proc/self/fd/5'],
      ],
      { encoding: 'utf8' },
    );
    expect(r.stdout).toBe(
      `${readFileSync('/etc/hostname', 'utf8')}${readlinkSync('/proc/self/ns/user')}\n${readlinkSync('/proc/self/ns/net')}\n`,
    );
  });

  it('refuses a process that started at another time than the daemon saw (its PID given again), or is gone', () => {
    const start = processRef(process.pid)!.start;
    for (const [pid, told] of [
      [process.pid, `${start}9`],
      [spawnSync('true').pid, start],
    ] as const) {
      const r = through(pid, told, ['echo', 'entered']);
      expect(r).toMatchObject({ status: 126, stdout: '', stderr: 'gpu: the workload has ended\n' });
    }
  });

  it("enters nothing of a process that took the PID after the check: its namespaces are not the workload's to join", async () => {
    // The kernel gives a PID again once its process is gone: between the check and nsenter opening the namespaces
    // by PID, the workload's first process may have ended and another taken its number. Here, for a root daemon, a
    // process in a user namespace of its own that has the workload's user (as a container of that user's would),
    // with a network of its own; else the machine's own (this test's node). The entering command, the PID now naming
    // that process, must refuse.
    const w = await idleWorkload();
    const init = w.sandbox.entry.process()!.pid;
    let other = process.pid;
    if (w.uid !== undefined) {
      const held = spawn('unshare', ['--user', '--mount', '--net', '--pid', '--fork', '--kill-child', 'sleep', '60'], {
        stdio: 'ignore',
      });
      others.push(held);
      const pid = await until(
        () => Number(readFileSync(`/proc/${held.pid}/task/${held.pid}/children`, 'utf8')) || null,
      );
      writeFileSync(`/proc/${pid}/uid_map`, `${w.uid} ${w.uid} 1`);
      writeFileSync(`/proc/${pid}/setgroups`, 'deny');
      writeFileSync(`/proc/${pid}/gid_map`, `${w.uid} ${w.uid} 1`);
      other = pid;
    }
    const command = entryCommand(w.sandbox.entry, { argv: ['ip', '-o', 'link'], tty: false }, reachDir);
    // The wrapper checks the PID it is given (args 4 and 5); what follows it names the other process.
    const args = command.args.map((a, i) => (i > 5 && a === `--target=${init}` ? `--target=${other}` : a));
    expect(args).not.toEqual(command.args);
    const r = spawnSync(command.file, args, { env: command.env, encoding: 'utf8' });
    expect(r.stdout).toBe('');
    expect(r.status).not.toBe(0);
  });
});
