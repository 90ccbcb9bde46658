/**
 * `gpu port-forward`, `gpu ssh-config` and `gpu ssh-proxy` run as a person runs them (child processes, a saved
 * sign-in) against the real auth service, registry, billing and gateway and a daemon running an idle workload in the
 * real sandbox (the provider daemon's workload rig, as tools/provider-daemon/test/reach-ports.test.ts sets it up):
 * servers inside the workload reached on local ports (HTTP, a WebSocket, megabytes of raw bytes, a request ended by a
 * half-close), a port where nothing listens refused while the forwarder goes on, Ctrl-C, the session's end; OpenSSH's
 * `ssh` and `scp` through the hosts `ssh-config --write` set into a temporary home's `~/.ssh/config`.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createLogger } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { ReachLink } from '../../provider-daemon/src/reach/link.ts';
import type { WorkloadRunner } from '../../provider-daemon/src/workloads/runner.ts';
import { until, useWorkloadRig } from '../../provider-daemon/test/support/workload-rig.ts';
import { CLI_TEST_MS, type Gpu, gpuAt, gpuCommandLine, root } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const run = promisify(execFile);
const rig = useWorkloadRig({ billing: { reach: { check_interval: '200ms', ports_url: 'http://ports.localhost' } } });
const logger = createLogger({ service: 'cli-reach-test', instanceId: 't', level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'gpu-reach-'));
const configDir = join(dir, 'config');

let machine: Awaited<ReturnType<typeof rig.machine>>;
let runner: WorkloadRunner;
let link: ReachLink;
let gateway: Awaited<ReturnType<typeof buildGateway>>;
let url = '';
let gpu: Gpu;
let renter: { id: string; headers: Record<string, string>; walletId: string };
const children = new Set<ChildProcess>();

beforeAll(async () => {
  machine = await rig.machine();
  runner = machine.runner();
  runner.run();
  const billingUrl = machine.deps.config.billing_url;
  link = new ReachLink({
    config: machine.deps.config,
    logger,
    token: machine.deps.token,
    providerId: () => machine.providerId,
    entryOf: (id) => runner.entryOf(id),
  });
  link.start();
  gateway = await buildGateway({
    upstreams: {
      auth: rig.platform.authUrl,
      'provider-registry': rig.platform.registryUrl,
      billing: billingUrl,
      storage: 'http://127.0.0.1:9',
    },
    logLevel: 'silent',
  });
  url = await gateway.listen({ host: '127.0.0.1', port: 0 });

  const { user, email, password, tokens } = await registerAndLogin(rig.platform.auth.app, { roles: ['renter'] });
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await rig.billing.app.inject({
    method: 'POST',
    url: '/api/v1/wallet',
    headers,
    payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
  });
  expect(wallet.statusCode, wallet.body).toBe(201);
  await rig.billing.credit(wallet.json().id, '100');
  renter = { id: user.id, headers, walletId: wallet.json().id };
  gpu = gpuAt(url, configDir);
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login.code, login.stderr).toBe(0);
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await link?.stop();
  await runner?.stop();
  await gateway?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A `gpu` left running: what it printed so far, a wait for a line of its standard output, its exit. */
function started(args: string[], env: Record<string, string> = {}) {
  const [node, ...rest] = gpuCommandLine(args);
  const child = spawn(node!, rest, {
    cwd: root,
    env: { ...process.env, GPU_URL: url, GPU_CONFIG_DIR: configDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const exited = new Promise<number>((resolve) =>
    child.once('exit', (code, signal) => {
      children.delete(child);
      resolve(code ?? (signal ? 128 : -1));
    }),
  );
  return {
    child,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    /** The first match of `pattern` in its standard output, once it printed it (or its end, failing). */
    async line(pattern: RegExp, ms = 30_000): Promise<RegExpExecArray> {
      const end = Date.now() + ms;
      for (;;) {
        const m = pattern.exec(stdout);
        if (m) return m;
        if (child.exitCode !== null || Date.now() > end) {
          throw new Error(`no ${pattern} in its output (exit ${child.exitCode}): ${stdout}\n${stderr}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** An idle workload's session of the renter's, once it runs. */
async function idleSession(): Promise<string> {
  const r = await rig.rent(machine.providerId, 1, { idle: true, max_runtime_seconds: 300 }, renter);
  const w = await until(
    () => rig.workloadOf(r.headers, r.id),
    (w) => w.state === 'running',
    30_000,
  );
  expect(w.state).toBe('running');
  return r.id;
}

/** Opens a connection to a local port; what the other side sent until it closed (or `ms` passed). */
function talk(port: number, request: Buffer | string, opts: { halfClose?: boolean } = {}): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.on('data', (d) => chunks.push(d));
    socket.on('end', () => {
      socket.end();
      resolve(Buffer.concat(chunks));
    });
    socket.on('error', reject);
    socket.setTimeout(20_000, () => reject(new Error('no answer')));
    socket.write(request);
    if (opts.halfClose) socket.end();
  });
}

/** Sends `bytes` on a new connection to `port` and reads as many back (an echo server at the other end). */
function echoed(port: number, bytes: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    let got = 0;
    socket.on('data', (d) => {
      chunks.push(d);
      got += d.length;
      if (got >= bytes.length) {
        socket.end();
        resolve(Buffer.concat(chunks));
      }
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error(`closed after ${got} of ${bytes.length} bytes`)));
    socket.write(bytes);
  });
}

const ECHO_SERVER = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
`;

describe('gpu port-forward', () => {
  it('reaches servers in the workload on local ports: HTTP, a WebSocket, raw megabytes; a refusal; Ctrl-C', async () => {
    const id = await idleSession();
    const wsEcho = readFileSync(join(root, 'tools/provider-daemon/test/fixtures/ws-echo.py'), 'utf8');
    expect((await gpu(['exec', id, '--', 'sh', '-c', 'cat > /tmp/ws-echo.py'], { input: wsEcho })).code).toBe(0);
    expect((await gpu(['exec', id, '--', 'sh', '-c', 'cat > /tmp/echo.py'], { input: ECHO_SERVER })).code).toBe(0);
    // Servers left running in the workload, each by a `gpu exec` of its own.
    const page = await gpu(['exec', id, '--', 'sh', '-c', 'mkdir -p /tmp/www && cat > /tmp/www/hello.txt'], {
      input: 'hello from the workload\n',
    });
    expect(page.code, page.stderr).toBe(0);
    started(['exec', id, '--', 'python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www']);
    started(['exec', id, '--', 'python3', '/tmp/ws-echo.py', '9000']);
    started(['exec', id, '--', 'python3', '/tmp/echo.py', '9100']);

    const forwarder = started(['port-forward', id, '8000:0', '9000:0', '9100:0', '8001:0']);
    const local = new Map<number, number>();
    for (const remote of [8000, 9000, 9100, 8001]) {
      const m = await forwarder.line(new RegExp(`^Forwarding from 127\\.0\\.0\\.1:(\\d+) -> ${remote}$`, 'm'));
      local.set(remote, Number(m[1]));
    }
    const web = `http://127.0.0.1:${local.get(8000)}`;
    // The servers start in their own time: asked until they answer.
    const first = await until(
      () =>
        fetch(`${web}/hello.txt`).then(
          (r) => r.status,
          () => 0,
        ),
      (status) => status === 200,
      60_000,
    );
    expect(first, forwarder.stderr()).toBe(200);
    const pages = await Promise.all([1, 2, 3, 4].map(() => fetch(`${web}/hello.txt`).then((r) => r.text())));
    expect(pages).toEqual([
      'hello from the workload\n',
      'hello from the workload\n',
      'hello from the workload\n',
      'hello from the workload\n',
    ]);
    // A request ended by a half-close still gets its whole answer.
    const halfClosed = await talk(local.get(8000)!, 'GET /hello.txt HTTP/1.0\r\n\r\n', { halfClose: true });
    expect(String(halfClosed)).toMatch(/^HTTP\/1\.0 200 OK[\s\S]*\r\n\r\nhello from the workload\n$/);

    // A WebSocket inside the forwarded connection (a notebook's kernel socket): bytes like any other.
    const client = await until(
      async () => {
        const ws = new WebSocket(`ws://127.0.0.1:${local.get(9000)}/`);
        return new Promise<WebSocket | null>((resolve) => {
          ws.once('open', () => resolve(ws));
          ws.once('error', () => resolve(null));
        });
      },
      (ws) => ws !== null,
      30_000,
    );
    const echo = new Promise<string>((resolve) => client!.once('message', (d) => resolve(String(d))));
    client!.send('a kernel message');
    expect(await echo).toBe('a kernel message');
    client!.close();

    // Megabytes both ways at once, byte for byte.
    const bytes = randomBytes(8 * 1024 * 1024);
    await until(
      () =>
        echoed(local.get(9100)!, Buffer.from('ready?')).then(
          () => true,
          () => false,
        ),
      (ok) => ok,
      30_000,
    );
    const back = await echoed(local.get(9100)!, bytes);
    expect(createHash('sha256').update(back).digest('hex')).toBe(createHash('sha256').update(bytes).digest('hex'));

    // Nothing listens on 8001: that connection is closed and says why; the forwarder goes on.
    // (Closed unread, the connection is reset rather than ended: either way nothing comes back.)
    expect((await talk(local.get(8001)!, 'hello').catch(() => Buffer.alloc(0))).length).toBe(0);
    await until(
      async () => forwarder.stderr(),
      (s) => s.includes('port 8001: PORT_NOT_LISTENING'),
    );
    expect(forwarder.stderr()).toMatch(/^gpu: port 8001: PORT_NOT_LISTENING: [^\n]+\n/m);
    expect(await fetch(`${web}/hello.txt`).then((r) => r.text())).toBe('hello from the workload\n');

    // Ctrl-C: the listeners closed, exit status 0, nothing more printed.
    forwarder.child.kill('SIGINT');
    expect(await forwarder.exited).toBe(0);
    await expect(fetch(`${web}/hello.txt`)).rejects.toThrow();
    expect(forwarder.stdout().split('\n').filter(Boolean)).toHaveLength(4);
  });

  it('refuses at once a session that is unknown or has ended, and stops when its session ends', async () => {
    const unknown = await gpu(['port-forward', '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11', '8000']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^gpu: SESSION_NOT_FOUND: [^\n]+\n$/);
    expect(unknown.stdout).toBe('');

    const id = await idleSession();
    const forwarder = started(['port-forward', id, '8000:0']);
    const port = Number((await forwarder.line(/^Forwarding from 127\.0\.0\.1:(\d+) -> 8000$/m))[1]);
    expect((await gpu(['end', id])).code).toBe(0);
    // The next connection is refused for good: the forwarder says so and stops.
    await talk(port, 'GET / HTTP/1.0\r\n\r\n').catch(() => Buffer.alloc(0));
    expect(await forwarder.exited).toBe(1);
    expect(forwarder.stderr()).toMatch(/^gpu: SESSION_NOT_ACTIVE: [^\n]+\n$/m);

    const ended = await gpu(['port-forward', id, '8000']);
    expect(ended.code).toBe(1);
    expect(ended.stderr).toMatch(new RegExp(`^gpu: session ${id} has ended \\([a-z_]+\\)\\n$`));
  });
});

describe('gpu open', () => {
  it("prints a link that signs a browser in at the port's own address, once", async () => {
    const id = await idleSession();
    const opened = await gpu(['open', id, '8888']);
    expect(opened.code, opened.stderr).toBe(0);
    const link = new URL(opened.stdout.trim());
    expect(link.origin).toBe(`http://${id}-8888.ports.localhost`);
    expect(link.pathname).toBe('/');
    expect(opened.stderr).toContain(`http://${id}-8888.ports.localhost`);
    // Opened as a browser opens it, through the gateway: the browser's cookie, once.
    const gateway = new URL(url);
    const open = () =>
      run('curl', [
        '-sS',
        '-o',
        '/dev/null',
        '-D',
        '-',
        '--connect-to',
        `${link.hostname}:80:127.0.0.1:${gateway.port}`,
        link.href,
      ]).then((r) => r.stdout);
    const first = await open();
    expect(first).toMatch(/^HTTP\/1\.1 303 /);
    expect(first).toMatch(/^set-cookie: gpu_port_grant=/im);
    expect(await open()).toMatch(/^HTTP\/1\.1 401 /);
    const asJson = await gpu(['--json', 'open', id, '8888']);
    expect(JSON.parse(asJson.stdout)).toMatchObject({ origin: link.origin, url: expect.stringContaining(link.origin) });
    expect((await gpu(['open', id, '8888:9000'])).code).toBe(2);
    const unknown = await gpu(['open', '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11', '8888']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^gpu: SESSION_NOT_FOUND: [^\n]+\n$/);
  });
});

describe('gpu ssh-config and ssh-proxy', () => {
  it('writes hosts that ssh and scp reach the workload through, with the key registered by gpu ssh-key add', async () => {
    const id = await idleSession();
    const key = join(dir, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'cli-test', '-f', key]);
    const home = join(dir, 'home');
    // No key at the platform yet: said, and the hosts printed all the same.
    const printed = await gpu(['ssh-config'], { env: { HOME: home } });
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toContain(`Host gpu-${id.slice(0, 8)} gpu-${id}\n  HostName ${id}\n  User workload\n`);
    expect(printed.stdout).toMatch(/ {2}ProxyCommand env GPU_CONFIG_DIR=\S+ \S+ \S+\/tools\/cli\/bin\/gpu\.mjs --url /);
    expect(printed.stderr).toContain('you have no SSH key at the platform yet');
    expect(printed.stderr).toMatch(/host key SHA256:[A-Za-z0-9+/]{43} is in /);
    const known = readFileSync(join(configDir, 'known_hosts'), 'utf8');
    expect(known).toMatch(/^gpu-platform ecdsa-sha2-nistp256 AAAA[A-Za-z0-9+/=]+\n$/);

    expect((await gpu(['ssh-key', 'add', `${key}.pub`])).code).toBe(0);
    const sshConfig = join(home, '.ssh', 'config');
    mkdirSync(join(home, '.ssh'), { recursive: true });
    writeFileSync(sshConfig, 'Host elsewhere\n  User me\n');
    const written = await gpu(['ssh-config', id, '--identity', key, '--write'], { env: { HOME: home } });
    expect(written.code, written.stderr).toBe(0);
    expect(written.stderr).not.toContain('no SSH key');
    const text = readFileSync(sshConfig, 'utf8');
    expect(text).toMatch(/^Host elsewhere\n {2}User me\n\n# >>> gpu ssh-config >>>/);
    expect(text).toContain(`  IdentityFile ${key}\n`);

    // OpenSSH reads ~ from the password database, not HOME: the file is named.
    const ssh = (program: string, args: string[]) =>
      run(program, ['-F', sshConfig, '-o', 'BatchMode=yes', ...args], { timeout: 60_000 }).then(
        (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
        (e: { code: number; stdout: string; stderr: string }) => e,
      );
    const hello = await ssh('ssh', [`gpu-${id.slice(0, 8)}`, 'echo "hi from $(hostname)"; exit 3']);
    expect(hello.stdout, hello.stderr).toBe('hi from workload\n');
    expect(hello.code).toBe(3);
    const file = join(dir, 'up.bin');
    const content = randomBytes(1024 * 1024);
    writeFileSync(file, content);
    const up = await ssh('scp', [file, `gpu-${id}:/tmp/up.bin`]);
    expect(up.code, up.stderr).toBe(0);
    const down = await ssh('scp', [`gpu-${id.slice(0, 8)}:/tmp/up.bin`, join(dir, 'down.bin')]);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(join(dir, 'down.bin')).equals(content)).toBe(true);

    // Written again: the block replaced, not added twice.
    expect((await gpu(['ssh-config', '--write'], { env: { HOME: home } })).code).toBe(0);
    expect(readFileSync(sshConfig, 'utf8').match(/# >>> gpu ssh-config >>>/g)).toHaveLength(1);
  });

  it('exits 255 with the reason on standard error, and nothing on standard output, when refused', async () => {
    const refused = await gpu(['ssh-proxy', '3f0c5b8e-3a55-4d47-9a3c-3c1f7c1c9d11'], { input: 'SSH-2.0-OpenSSH\r\n' });
    expect(refused).toMatchObject({ code: 255, stdout: '' });
    expect(refused.stderr).toMatch(/^gpu: SESSION_NOT_FOUND: [^\n]+\n$/);
  });
});
