/**
 * Forwarded ports (src/reach/ports.ts) against real bubblewrap sandboxes and Podman containers, as root: a server on a
 * workload's own loopback is reached, several connections at once; a port where nothing listens is refused before
 * anything is accepted, and so is one where only the machine's loopback listens (the workload's network namespace is
 * the one used); the forwarder runs as the workload's user in that namespace and is gone, with its connections, when
 * the workload ends. Through the daemon's SSH link (a stand-in relay dialled by the real `ReachLink`), a forward is a
 * `direct-tcpip` channel: the renter's end of input reaches the program, which still answers.
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { staticToken } from '@gpu/client';
import { createLogger } from '@gpu/common';
import ssh2, { type ClientChannel } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebSocketStream, WebSocketServer } from 'ws';
import { daemonConfigSchema } from '../src/config.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { type ExecProcess, startExec } from '../src/reach/exec.ts';
import { ReachLink } from '../src/reach/link.ts';
import { ForwardError, WorkloadPorts } from '../src/reach/ports.ts';
import { startContainer } from '../src/workloads/container.ts';
import { simulatedDevices } from '../src/workloads/devices.ts';
import { prepareDisk, releaseDisk } from '../src/workloads/disk.ts';
import { type Entry, entryCommand } from '../src/workloads/entry.ts';
import { running } from '../src/workloads/processes.ts';
import { IDLE_COMMAND } from '../src/workloads/runner.ts';
import { type Sandbox, startSandbox } from '../src/workloads/sandbox.ts';
import { testImage, testRuntimeArgs } from './support/containers.ts';

const isRoot = process.getuid?.() === 0;
const root = mkdtempSync(path.join(tmpdir(), 'ports-test-'));
chmodSync(root, 0o711);
const reachDir = path.join(root, '.reach');
const machine = daemonConfigSchema.parse({
  gpu: { source: 'simulated', simulated_gpus: [{ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 }] },
});
const readings = await gpuSource(machine.gpu).read();
const devices = simulatedDevices(path.join(root, 'dev'), readings);
const LIMITS = SANDBOX_LIMITS;

/** The workloads the module reaches, by session, as the runner's `entryOf` gives them. */
const entries = new Map<string, Entry>();
const ports = new WorkloadPorts((id) => entries.get(id) ?? null);
const workloads: Sandbox[] = [];
const dirs: string[] = [];
afterAll(async () => {
  ports.stop();
  await Promise.all(workloads.map((w) => w.stop('test over')));
  for (const dir of dirs) await releaseDisk(dir);
  rmSync(root, { recursive: true, force: true });
});

/** A session's directory and disk, as the runner makes them for a root daemon. */
async function sessionDisk(sessionId: string, uid: number) {
  const dir = path.join(root, sessionId);
  mkdirSync(path.join(dir, 'logs'), { recursive: true });
  chmodSync(dir, 0o711);
  const disk = await prepareDisk(dir, LIMITS, 'filesystem', uid);
  dirs.push(dir);
  return { disk, logDir: path.join(dir, 'logs') };
}

/** An idle sandbox with no network, running under a session ID of its own. */
async function idleSandbox() {
  const sessionId = randomUUID();
  const uid = 220_000 + Math.floor(Math.random() * 10_000);
  const { disk, logDir } = await sessionDisk(sessionId, uid);
  const sandbox = startSandbox({
    spec: { command: [...IDLE_COMMAND], env: {}, max_runtime_seconds: 120, network: false, inputs: [] },
    disk,
    logDir,
    gpus: [{ uuid: readings[0]!.uuid, device: devices.get(0)! }],
    controlDevices: [],
    limits: LIMITS,
    uid,
    hidden: [],
    platformEnv: { GPU_PLATFORM_SESSION_ID: sessionId },
    stopGraceMs: 500,
  });
  workloads.push(sandbox);
  await sandbox.ready;
  await programStarted(sandbox.entry);
  entries.set(sessionId, sandbox.entry);
  return { sandbox, sessionId, uid, workDir: disk.workDir };
}

/** Starts a program in the workload (a server), which runs until the workload ends. */
function startIn(sandbox: Sandbox, argv: string[]): ExecProcess {
  const proc = startExec(entryCommand(sandbox.entry, { argv, tty: false }, reachDir), null);
  proc.stdin.end();
  proc.stdout.resume();
  proc.stderr?.resume();
  return proc;
}

/** A connection to the port once something listens on it (a server inside just started). */
async function connectWhenListening(sessionId: string, port: number): Promise<Socket> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      return await ports.connect(sessionId, port);
    } catch (err) {
      if ((err as ForwardError).reason !== 'refused' || Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
}

/** An HTTP/1.0 GET over the socket: the whole answer once the server closes. */
async function get(socket: Socket, target: string): Promise<string> {
  const chunks: Buffer[] = [];
  socket.on('data', (d: Buffer) => chunks.push(d));
  socket.write(`GET ${target} HTTP/1.0\r\nHost: workload\r\n\r\n`);
  await once(socket, 'end');
  socket.end();
  return Buffer.concat(chunks).toString();
}

/** The host processes running the forwarder of the session. */
function forwarders(sessionId: string): number[] {
  const pids = spawnSync('pgrep', ['-f', `gpu-port-forwarder ${sessionId}`], { encoding: 'utf8' }).stdout;
  return pids.split('\n').filter(Boolean).map(Number);
}

/** Who a process runs as: its user IDs (real, effective, saved, filesystem), groups, capabilities, no_new_privs. */
function credentials(pid: number) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => new RegExp(`^${name}:[ \t]*(.*)$`, 'm').exec(status)?.[1]?.trim();
  return {
    uids: field('Uid')?.split(/\s+/).map(Number),
    groups: field('Groups'),
    capabilities: [field('CapPrm'), field('CapEff'), field('CapInh'), field('CapAmb')],
    noNewPrivs: field('NoNewPrivs'),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until the process `pid` has ended (20 s at most, however busy the machine). */
async function gone(pid: number): Promise<void> {
  for (const end = Date.now() + 20_000; running(pid) && Date.now() < end; ) await sleep(20);
}

/** A server on the machine's own loopback, which no workload may reach. */
async function machineServer(): Promise<{ server: Server; port: number; accepted: () => number }> {
  let accepted = 0;
  const server = createServer((s) => {
    accepted++;
    s.end('the machine\n');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port, accepted: () => accepted };
}

describe.skipIf(!isRoot)('a port of a workload, forwarded (needs root)', () => {
  it("reaches a server on the workload's loopback, several connections at once, from its own user and namespace", async () => {
    const w = await idleSandbox();
    writeFileSync(path.join(w.workDir, 'hello.txt'), 'hello from inside\n', { mode: 0o644 });
    startIn(w.sandbox, ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '--directory', '/work']);
    const first = await get(await connectWhenListening(w.sessionId, 8000), '/hello.txt');
    expect(first).toMatch(/^HTTP\/1\.0 200/);
    expect(first.endsWith('\r\n\r\nhello from inside\n')).toBe(true);
    const many = await Promise.all(
      Array.from({ length: 8 }, async () => get(await ports.connect(w.sessionId, 8000), '/hello.txt')),
    );
    for (const answer of many) expect(answer.endsWith('hello from inside\n')).toBe(true);
    // One forwarder for the workload, as its user, in its network namespace (not the machine's).
    const [pid, ...more] = forwarders(w.sessionId);
    expect(more).toEqual([]);
    expect(credentials(pid!)).toEqual({
      uids: [w.uid, w.uid, w.uid, w.uid],
      groups: '',
      capabilities: Array(4).fill('0000000000000000'),
      noNewPrivs: '1',
    });
    const inits = readlinkSync(`/proc/${w.sandbox.entry.process()?.pid}/ns/net`);
    expect(readlinkSync(`/proc/${pid}/ns/net`)).toBe(inits);
    expect(inits).not.toBe(readlinkSync('/proc/self/ns/net'));
  });

  it('refuses a port nothing listens on, one only the machine listens on, and destinations that are not forwards', async () => {
    const w = await idleSandbox();
    await expect(ports.connect(w.sessionId, 8001)).rejects.toMatchObject({
      reason: 'refused',
      message: 'nothing listens on port 8001 in the workload',
    });
    // The machine's 127.0.0.1 is not the workload's.
    const host = await machineServer();
    try {
      await expect(ports.connect(w.sessionId, host.port)).rejects.toBeInstanceOf(ForwardError);
      await expect(ports.connect(w.sessionId, host.port)).rejects.toMatchObject({ reason: 'refused' });
      expect(host.accepted()).toBe(0);
    } finally {
      host.server.close();
    }
    await expect(ports.connect('not-a-session', 80)).rejects.toMatchObject({ reason: 'invalid' });
    await expect(ports.connect(w.sessionId, 0)).rejects.toMatchObject({ reason: 'invalid' });
    await expect(ports.connect(w.sessionId, 65_536)).rejects.toMatchObject({ reason: 'invalid' });
    await expect(ports.connect(randomUUID(), 80)).rejects.toMatchObject({ reason: 'no_workload' });
  });

  it('ends the forwarder and the connections in flight when the workload ends', async () => {
    const w = await idleSandbox();
    startIn(w.sandbox, ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1']);
    // Open, its request never sent: the server waits.
    const held = await connectWhenListening(w.sessionId, 8000);
    const closed = once(held, 'close');
    const [pid] = forwarders(w.sessionId);
    expect(pid).toBeDefined();
    await w.sandbox.stop('session_ended');
    await closed;
    await gone(pid!);
    expect(running(pid!)).toBe(false);
    expect(forwarders(w.sessionId)).toEqual([]);
    await expect(ports.connect(w.sessionId, 8000)).rejects.toMatchObject({ reason: 'no_workload' });
  });
});

/** Why the container test cannot run here, or null (the test setup exports the image where Podman runs one). */
const noContainers = !isRoot
  ? 'needs root'
  : !process.env.TEST_CONTAINER_IMAGE
    ? 'TEST_CONTAINER_IMAGE is not set: scripts/test-env.sh found no way for Podman to run a container here'
    : null;

describe('a port of a container workload, forwarded', () => {
  it.skipIf(noContainers !== null)(
    `reaches busybox httpd on the container's loopback${noContainers ? ` (skipped: ${noContainers})` : ''}`,
    async () => {
      const sessionId = randomUUID();
      const uid = 230_000 + Math.floor(Math.random() * 10_000);
      const { disk, logDir } = await sessionDisk(sessionId, uid);
      writeFileSync(path.join(disk.workDir, 'index.html'), 'hello from the container\n', { mode: 0o644 });
      const container = startContainer({
        spec: {
          image: testImage,
          command: ['/bin/busybox', 'httpd', '-f', '-p', '127.0.0.1:8080', '-h', '/work'],
          env: {},
          max_runtime_seconds: 120,
          network: false,
          inputs: [],
        },
        sessionId,
        daemon: root,
        disk,
        logDir,
        gpus: [],
        simulated: true,
        controlDevices: [],
        limits: LIMITS,
        uid,
        platformEnv: { GPU_PLATFORM_SESSION_ID: sessionId },
        stopGraceMs: 500,
        runtime: { path: 'podman', args: testRuntimeArgs },
      });
      workloads.push(container);
      await container.ready;
      entries.set(sessionId, container.entry);
      const answer = await get(await connectWhenListening(sessionId, 8080), '/index.html');
      expect(answer).toMatch(/^HTTP\/1\.[01] 200/);
      expect(answer.endsWith('hello from the container\n')).toBe(true);
      await expect(ports.connect(sessionId, 8081)).rejects.toMatchObject({ reason: 'refused' });
      const [pid] = forwarders(sessionId);
      expect(credentials(pid!).uids).toEqual([uid, uid, uid, uid]);
      await container.stop('session_ended');
      await gone(pid!);
      expect(running(pid!)).toBe(false);
    },
  );
});

/**
 * A stand-in for billing's relay: it takes the daemon's WebSocket and is the SSH client on it, as the relay is (no
 * token is checked here).
 */
async function standInRelay() {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, path: '/api/v1/billing/reach/daemon' });
  await once(wss, 'listening');
  const ssh = new Promise<ssh2.Client>((resolve, reject) => {
    wss.once('connection', (ws) => {
      const client = new ssh2.Client();
      client.once('ready', () => resolve(client)).once('error', reject);
      client.connect({ sock: createWebSocketStream(ws) as never, username: 'relay', hostVerifier: () => true });
    });
  });
  const { port } = wss.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, ssh, close: () => wss.close() };
}

/** A `direct-tcpip` channel to the session's port, as the relay opens it; rejects with ssh2's open failure. */
function forwardOut(ssh: ssh2.Client, sessionId: string, port: number): Promise<ClientChannel> {
  return new Promise((resolve, reject) => {
    ssh.forwardOut('127.0.0.1', 0, sessionId, port, (err, channel) => (err ? reject(err) : resolve(channel)));
  });
}

/** What the channel carries until its EOF. */
async function readToEof(channel: ClientChannel): Promise<string> {
  const chunks: Buffer[] = [];
  channel.on('data', (d: Buffer) => chunks.push(d));
  await once(channel, 'end');
  return Buffer.concat(chunks).toString();
}

/**
 * A server that reads to its client's end (its half-close), then answers how many bytes came and closes; and one that
 * speaks first, before anything is sent to it.
 */
const SERVERS = `
import socket, threading
def serve(port, handle):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,)).start()
def count(c):
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        n += len(d)
    c.sendall(b'%d bytes' % n)
    c.close()
def first(c):
    c.sendall(b'hello first\\n')
    c.close()
threading.Thread(target=serve, args=(8002, count)).start()
serve(8003, first)
`;

import { programStarted, SANDBOX_LIMITS } from './support/sandbox-fixtures.ts';

describe.skipIf(!isRoot)("through the daemon's SSH link: a direct-tcpip channel", () => {
  let relay: Awaited<ReturnType<typeof standInRelay>>;
  let link: ReachLink;
  let ssh: ssh2.Client;
  beforeAll(async () => {
    relay = await standInRelay();
    link = new ReachLink({
      config: daemonConfigSchema.parse({ ...machine, billing_url: relay.url }),
      logger: createLogger({ service: 'ports-test', instanceId: 't', level: 'silent' }),
      token: staticToken('t'),
      providerId: () => 'provider',
      entryOf: (id) => entries.get(id) ?? null,
    });
    link.start();
    ssh = await relay.ssh;
  });
  afterAll(async () => {
    await link?.stop();
    relay?.close();
  });

  it("passes the renter's end of input on while the program answers, what a program says first, and refuses an open no one takes", async () => {
    const w = await idleSandbox();
    startIn(w.sandbox, ['python3', '-c', SERVERS]);
    await connectWhenListening(w.sessionId, 8003).then((s) => s.destroy());
    // The renter's EOF reaches the program, whose answer still comes back; then the channel closes.
    const counted = await forwardOut(ssh, w.sessionId, 8002);
    const answer = readToEof(counted);
    const closed = once(counted, 'close');
    counted.end('abcdef');
    expect(await answer).toBe('6 bytes');
    await closed;
    // A program that speaks first: nothing of it stays behind in the forwarder.
    const first = await forwardOut(ssh, w.sessionId, 8003);
    expect(await readToEof(first)).toBe('hello first\n');
    // Refused with SSH's CONNECT_FAILED (2), which the relay turns into its answer to the renter.
    await expect(forwardOut(ssh, w.sessionId, 8009)).rejects.toMatchObject({ reason: 2 });
    await expect(forwardOut(ssh, randomUUID(), 8002)).rejects.toMatchObject({ reason: 2 });
  });
});
