/**
 * A daemon that is not root, reaching its own workload: run by test/unprivileged-reach.test.ts as an unprivileged
 * user (never as root: it refuses). It starts an idle sandbox as the daemon's runner does for such a daemon (its own
 * user, a watched work directory), then enters it with a program (pipes and a terminal), packs a checkpoint from
 * inside it, and forwards a port of a server started in it, and prints what it saw as one line of JSON. Everything it writes is under a temporary folder
 * of its own, removed at its end.
 */
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { startExec } from '../../src/reach/exec.ts';
import { WorkloadPorts } from '../../src/reach/ports.ts';
import { packRunning } from '../../src/workloads/checkpoint.ts';
import { prepareDisk, releaseDisk } from '../../src/workloads/disk.ts';
import { entryCommand } from '../../src/workloads/entry.ts';
import { IDLE_COMMAND } from '../../src/workloads/runner.ts';
import { startSandbox } from '../../src/workloads/sandbox.ts';
import { execIn, programStarted, SANDBOX_LIMITS, simulatedMachine } from './sandbox-fixtures.ts';

if (process.getuid?.() === 0) throw new Error('run this as a user that is not root');

const root = mkdtempSync(path.join(tmpdir(), 'unprivileged-reach-'));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const report: Record<string, unknown> = {};
const sessionId = '7d3c6a52-0f59-4c8e-9a57-3f6c1b2d9e41';
const dir = path.join(root, sessionId);
const secret = path.join(root, 'daemon', 'credentials.json');
mkdirSync(path.dirname(secret));
writeFileSync(secret, '{"client_secret":"s3cr3t"}', { mode: 0o600 });
const machineServer = createServer((s) => s.end('the machine\n'));
let machineAccepted = 0;
machineServer.on('connection', () => machineAccepted++);
await new Promise<void>((r) => machineServer.listen(0, '127.0.0.1', r));
const ports = new WorkloadPorts((id) => (id === sessionId ? sandbox.entry : null));

const { readings, devices } = await simulatedMachine(root);
const limits = SANDBOX_LIMITS;
mkdirSync(path.join(dir, 'logs'), { recursive: true });
const disk = await prepareDisk(dir, limits, 'watch', null);
const sandbox = startSandbox({
  spec: {
    command: [...IDLE_COMMAND],
    env: { SECRET_TOKEN: 'tok-7c1e' },
    max_runtime_seconds: 120,
    network: false,
    inputs: [],
  },
  disk,
  logDir: path.join(dir, 'logs'),
  gpus: [{ uuid: readings[0]!.uuid, device: devices.get(0)! }],
  controlDevices: [],
  limits,
  hidden: [],
  platformEnv: { GPU_PLATFORM_SESSION_ID: sessionId },
  stopGraceMs: 500,
});
const reachDir = path.join(root, '.reach');

/** Runs argv in the workload with pipes. */
const exec = (argv: string[], input = '') => execIn(sandbox.entry, argv, reachDir, input);

try {
  await sandbox.ready;
  const init = await programStarted(sandbox.entry);
  writeFileSync(path.join(disk.workDir, 'notes.txt'), "the renter's\n");
  // The workload's own program (bwrap's init's child), as the machine sees it.
  const inner = Number(readFileSync(`/proc/${init}/task/${init}/children`, 'utf8').trim().split(/\s+/)[0]);
  const ns = (pid: number | 'self') =>
    Object.fromEntries(
      ['user', 'mnt', 'pid', 'net', 'ipc', 'uts'].map((n) => [n, readlinkSync(`/proc/${pid}/ns/${n}`)]),
    );
  const status = (text: string, field: string) => new RegExp(`^${field}:[ \t]*(.*)$`, 'm').exec(text)?.[1]?.trim();
  const workloadStatus = readFileSync(`/proc/${inner}/status`, 'utf8');
  report.workload = { ns: ns(inner), groups: status(workloadStatus, 'Groups') };
  report.daemon = { ns: ns('self'), uid: process.getuid?.() };

  const entered = await exec(
    [
      'sh',
      '-c',
      'echo "uid=$(id -u) host=$(hostname) pwd=$(pwd) token=$SECRET_TOKEN"; cat; ls /work; ' +
        'for n in user mnt pid net ipc uts; do echo "ns $n $(readlink /proc/self/ns/$n)"; done; ' +
        'grep -E "^(Groups|CapPrm|CapEff|CapInh|CapAmb|NoNewPrivs):" /proc/self/status; ' +
        'echo "fds $(ls /proc/self/fd | tr "\\n" " ")"; ' +
        'echo "procs $(ls -d /proc/[0-9]* | wc -l)"; ' +
        `cat ${secret} 2>/dev/null || echo "no daemon file"; ` +
        'unshare --user true 2>/dev/null && echo "made a user namespace" || echo "no user namespace"; exit 7',
    ],
    'from stdin\n',
  );
  report.entered = entered;

  // A job's checkpoint while it runs: packed from inside the workload, as a root daemon packs one.
  await exec(['sh', '-c', 'mkdir -p /work/checkpoint && echo step-7 > /work/checkpoint/state']);
  const tar = path.join(root, 'checkpoint.tar');
  await packRunning(sandbox.entry, reachDir, tar, 1 << 20);
  report.checkpoint = spawnSync('tar', ['-xOf', tar, './state'], { encoding: 'utf8' }).stdout;

  // A terminal: its size, and the shell's exit status.
  const terminal = startExec(
    entryCommand(
      sandbox.entry,
      { argv: ['sh', '-c', 'stty size; exit 3'], env: { TERM: 'xterm' }, tty: true },
      reachDir,
    ),
    { cols: 101, rows: 33 },
  );
  let screen = '';
  terminal.stdout.on('data', (d: Buffer) => {
    screen += String(d);
  });
  terminal.stdin.end();
  report.terminal = { end: await terminal.ended, screen };

  // A port: a server on the workload's loopback, reached; the machine's own loopback, never.
  writeFileSync(path.join(disk.workDir, 'hello.txt'), 'hello from inside\n', { mode: 0o644 });
  const server = startExec(
    entryCommand(
      sandbox.entry,
      { argv: ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '--directory', '/work'], tty: false },
      reachDir,
    ),
    null,
  );
  server.stdin.end();
  server.stdout.resume();
  server.stderr?.resume();
  let answer = '';
  for (const deadline = Date.now() + 30_000; ; ) {
    try {
      const socket = await ports.connect(sessionId, 8000);
      const chunks: Buffer[] = [];
      socket.on('data', (d: Buffer) => chunks.push(d));
      socket.write('GET /hello.txt HTTP/1.0\r\nHost: workload\r\n\r\n');
      await once(socket, 'end');
      socket.end();
      answer = Buffer.concat(chunks).toString();
      break;
    } catch (err) {
      if ((err as { reason?: string }).reason !== 'refused' || Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
  const forwarder = readFileSync('/proc/self/task/' + process.pid + '/children', 'utf8')
    .trim()
    .split(/\s+/)
    .map(Number)
    .find((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`gpu-port-forwarder\0${sessionId}`));
  const forwarderStatus = forwarder ? readFileSync(`/proc/${forwarder}/status`, 'utf8') : '';
  report.forward = {
    answer,
    forwarder: forwarder && {
      net: readlinkSync(`/proc/${forwarder}/ns/net`),
      uids: status(forwarderStatus, 'Uid'),
      capabilities: ['CapPrm', 'CapEff', 'CapInh', 'CapAmb'].map((f) => status(forwarderStatus, f)),
      noNewPrivs: status(forwarderStatus, 'NoNewPrivs'),
    },
  };
  const machinePort = (machineServer.address() as { port: number }).port;
  report.machinePort = await ports.connect(sessionId, machinePort).then(
    (s) => {
      s.destroy();
      return 'connected';
    },
    (err: { reason?: string }) => err.reason,
  );
  report.machineAccepted = machineAccepted;

  // A workload with the network: out through slirp4netns, never to the machine's own address or the private and
  // link-local ranges (fenced in its network namespace).
  const lan = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
  const lanServer = createServer((s) => s.end('hi\n'));
  await new Promise<void>((r) => lanServer.listen(0, '0.0.0.0', r));
  const lanPort = (lanServer.address() as { port: number }).port;
  const netDir = path.join(root, 'with-network');
  mkdirSync(path.join(netDir, 'logs'), { recursive: true });
  const netDisk = await prepareDisk(netDir, limits, 'watch', null);
  const networked = startSandbox({
    spec: { command: [...IDLE_COMMAND], env: {}, max_runtime_seconds: 120, network: true, inputs: [] },
    disk: netDisk,
    logDir: path.join(netDir, 'logs'),
    gpus: [],
    controlDevices: [],
    limits,
    hidden: [],
    platformEnv: {},
    stopGraceMs: 500,
  });
  try {
    await networked.ready;
    await programStarted(networked.entry);
    // (A fenced address fails at once; one that is not may take long to fail: 5 s at most.)
    const probe = (host: string) =>
      `timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${lanPort} && cat <&3' 2>/dev/null || echo unreachable`;
    const probed = await execIn(
      networked.entry,
      [
        'bash',
        '-c',
        [
          `echo "lan ${lan ? '' : 'none'}$(${probe(lan ?? '192.0.2.1')})"`,
          `echo "loopback $(${probe('127.0.0.1')})"`,
          `echo "metadata $(${probe('169.254.169.254')})"`,
          'echo "routes $(ip route | grep -c "^unreachable")"',
          'echo "way out $(ip route | grep -c "^default via 10.0.2.2 dev tap0")"',
        ].join('; '),
      ],
      reachDir,
    );
    report.network = probed.out;
  } finally {
    await networked.stop('test over');
    lanServer.close();
    await releaseDisk(netDir);
  }

  // Once the workload has ended, nothing enters it.
  await sandbox.stop('session_ended');
  try {
    entryCommand(sandbox.entry, { argv: ['true'], tty: false }, reachDir);
    report.afterEnd = 'entered';
  } catch (err) {
    report.afterEnd = (err as Error).message;
  }
} finally {
  ports.stop();
  await sandbox.stop('test over');
  machineServer.close();
  await releaseDisk(dir);
  rmSync(root, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(report)}\n`);
