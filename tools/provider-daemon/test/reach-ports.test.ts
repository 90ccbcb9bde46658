/**
 * Reaching what runs in a rented workload end to end, against the real auth service, registry, billing, gateway and a
 * daemon running an idle workload in the real sandbox: a server inside the workload (`python3 -m http.server`) fetched
 * through the gateway with curl, raw bytes and a WebSocket through forwarded ports, OpenSSH's `ssh` and `scp` with the
 * renter's own key (through `gpu ssh-proxy`), and the refusals: another renter, a key not registered, a port where
 * nothing listens, an ended session.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createLogger } from '@gpu/common';
import { openRawUpgrade, UpgradeRefused } from '@gpu/common/raw-upgrade';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { createWebSocketStream } from 'ws';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { ReachLink } from '../src/reach/link.ts';
import type { WorkloadRunner } from '../src/workloads/runner.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

const run = promisify(execFile);
const rig = useWorkloadRig({ billing: { reach: { check_interval: '200ms', ports_url: 'http://ports.localhost' } } });
const logger = createLogger({ service: 'reach-ports-test', instanceId: 't', level: 'silent' });
const dir = mkdtempSync(join(tmpdir(), 'reach-ports-'));
const root = new URL('../../..', import.meta.url).pathname;

let machine: Awaited<ReturnType<typeof rig.machine>>;
let runner: WorkloadRunner;
let heartbeats: NodeJS.Timeout | undefined;
let link: ReachLink;
let gateway: Awaited<ReturnType<typeof buildGateway>>;
let url = '';
let billingUrl = '';
let renter: Awaited<ReturnType<typeof rig.renter>>;
let apiKey = '';
/** The renter's registered key, and one they never registered. */
const key = join(dir, 'id_ed25519');
const strangerKey = join(dir, 'other_ed25519');
const knownHosts = join(dir, 'known_hosts');

beforeAll(async () => {
  machine = await rig.machine();
  // The machine stays online however long the file runs (the registry marks a silent machine offline).
  heartbeats = setInterval(() => void machine.daemon.heartbeat().catch(() => {}), 10_000);
  runner = machine.runner();
  runner.run();
  billingUrl = machine.deps.config.billing_url;
  link = startLink(machine.deps.config);
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
  renter = await rig.renter();
  const made = await rig.platform.auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/keys',
    headers: renter.headers,
    payload: { name: 'reach', scopes: ['connect', 'read'] },
  });
  expect(made.statusCode, made.body).toBe(201);
  apiKey = made.json().api_key;
  for (const file of [key, strangerKey]) await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', file]);
  const added = await rig.platform.auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/ssh-keys',
    headers: renter.headers,
    payload: { public_key: readFileSync(`${key}.pub`, 'utf8').trim() },
  });
  expect(added.statusCode, added.body).toBe(201);
  const hostKey = await fetch(`${url}/api/v1/billing/reach/ssh-host-key`);
  expect(hostKey.status).toBe(200);
  const { public_key: publicKey, fingerprint } = (await hostKey.json()) as Record<string, string>;
  expect(fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
  writeFileSync(knownHosts, `gpu-platform ${publicKey}\n`);
});
afterAll(async () => {
  clearInterval(heartbeats);
  await link?.stop();
  await runner?.stop();
  await gateway?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The machine's daemon's way in for renters, dialling the relay at `config.billing_url`, started. */
function startLink(config: typeof machine.deps.config): ReachLink {
  const started = new ReachLink({
    config,
    logger,
    token: machine.deps.token,
    providerId: () => machine.providerId,
    entryOf: (id) => runner.entryOf(id),
  });
  started.start();
  return started;
}

/** An idle workload's session of the renter's, once it runs. */
async function idleSession() {
  const r = await rig.rent(machine.providerId, 1, { idle: true, max_runtime_seconds: 300 }, renter);
  const w = await until(
    () => rig.workloadOf(r.headers, r.id),
    (w) => w.state === 'running',
    30_000,
  );
  expect(w.state).toBe('running');
  return r;
}

/**
 * Runs a program in the workload, its input given, until it ends: its output, and a rejection saying what it said
 * when it did not succeed (a file not written must not surface later as a server that never listens). With
 * `background` it is left running: resolved once its stream is open, with what it has said so far (`out()`) and its
 * end's status once it ends (`status()`, null while it runs).
 */
function execIn(sessionId: string, argv: string[], opts: { input?: string; background?: boolean } = {}) {
  const q = new URLSearchParams();
  for (const a of argv) q.append('command', a);
  const ws = new WebSocket(
    `${billingUrl.replace(/^http/, 'ws')}/api/v1/billing/sessions/${sessionId}/exec?${q}`,
    ['v5.channel.k8s.io'],
    { headers: renter.headers },
  );
  let out = '';
  let status: string | null = null;
  ws.on('message', (d: Buffer) => {
    if (d[0] === 1 || d[0] === 2) out += String(d.subarray(1));
    if (d[0] === 3) status = String(d.subarray(1));
  });
  const said = () => `${argv.join(' ')}: ${status ?? 'no status'}; it said: ${out.slice(-2000) || '(nothing)'}`;
  return new Promise<{ out: string; ws: WebSocket; said: () => string; ended: () => boolean }>((resolve, reject) => {
    ws.once('unexpected-response', (_req, res) => reject(new Error(`exec answered ${res.statusCode}`)));
    ws.once('error', reject);
    ws.once('open', () => {
      if (opts.input !== undefined) ws.send(Buffer.concat([Buffer.of(0), Buffer.from(opts.input)]));
      const ended = () => ws.readyState === WebSocket.CLOSING || ws.readyState === WebSocket.CLOSED;
      if (opts.background) return resolve({ out, ws, said, ended });
      ws.send(Buffer.of(255, 0));
      ws.once('close', () => {
        if (status !== null && JSON.parse(status).status === 'Success') resolve({ out, ws, said, ended });
        else reject(new Error(said()));
      });
    });
  });
}

/** A server left running in the workload, once something answers on its port; failing with what it said if not. */
async function serve(sessionId: string, argv: string[], port: number) {
  const server = await execIn(sessionId, argv, { background: true });
  // A busy machine starts a Python server slowly: wait generously, and say so when it never listened (or ended).
  const listening = await until(
    async () => {
      const probe = await portForward(sessionId, port, renter.headers);
      probe.ws?.close();
      return probe;
    },
    (probe) => probe.status === 101 || server.ended(),
    40_000,
  );
  expect(listening.status, `${JSON.stringify(listening.problem)}; ${server.said()}`).toBe(101);
  return server.ws;
}

/**
 * A WebSocket to `url`: 101, its socket and the headers its handshake was answered with; or the refusal's status and
 * problem (0: no answer).
 */
function connect(url: string, headers: Record<string, string>, protocols: string[] = []) {
  const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols, { headers });
  return new Promise<{
    status: number;
    problem?: Record<string, unknown>;
    ws?: WebSocket;
    told?: Record<string, unknown>;
  }>((resolve) => {
    let told: Record<string, unknown> = {};
    ws.once('upgrade', (res) => {
      told = res.headers;
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += String(d);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, problem: JSON.parse(body || '{}') }));
    });
    ws.once('open', () => resolve({ status: 101, ws, told }));
    ws.once('error', () => resolve({ status: 0 }));
  });
}

/** A port-forward WebSocket: 101 and its socket, or the refusal's status and problem. */
const portForward = (sessionId: string, port: number | string, headers: Record<string, string>, base = billingUrl) =>
  connect(`${base}/api/v1/billing/sessions/${sessionId}/port-forward?port=${port}`, headers);

/**
 * A port-forward as a raw byte stream (`Upgrade: tcp`, as `gpu port-forward` opens it): 101 and its socket, or the
 * refusal's status and problem.
 */
async function rawForward(
  sessionId: string,
  port: number | string,
  headers: Record<string, string>,
  base = billingUrl,
): Promise<{ status: number; problem?: Record<string, unknown>; socket?: net.Socket }> {
  try {
    const socket = await openRawUpgrade(`${base}/api/v1/billing/sessions/${sessionId}/port-forward?port=${port}`, {
      headers,
    });
    // A cut shows as its close.
    socket.on('error', () => {});
    return { status: 101, socket };
  } catch (err) {
    if (err instanceof UpgradeRefused) return { status: err.status, problem: err.problem() };
    throw err;
  }
}

/** Sends `request` on a raw forwarded connection, its end (FIN) after it, and reads until the server's end. */
async function exchangeRaw(socket: net.Socket, request: string): Promise<string> {
  const chunks: Buffer[] = [];
  socket.on('data', (d: Buffer) => chunks.push(d));
  const ended = new Promise<void>((resolve) => socket.once('end', () => resolve()));
  socket.end(request);
  await ended;
  socket.destroy();
  return Buffer.concat(chunks).toString();
}

/** Sends `request` on a forwarded connection, and reads until the workload's server closes it. */
async function exchange(ws: WebSocket, request: string): Promise<string> {
  const chunks: Buffer[] = [];
  ws.on('message', (d: Buffer) => chunks.push(d));
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  ws.send(Buffer.from(request));
  expect(await closed).toBe(1000);
  return Buffer.concat(chunks).toString();
}

/** A `connect` API key of the renter's: its bearer headers, and how to revoke it. */
async function connectKey(headers: Record<string, string>, name: string) {
  const made = await rig.platform.auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/keys',
    headers,
    payload: { name, scopes: ['connect'] },
  });
  expect(made.statusCode, made.body).toBe(201);
  const grant = await rig.platform.auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ grant_type: 'api_key', api_key: made.json().api_key }).toString(),
  });
  return {
    headers: { authorization: `Bearer ${grant.json().access_token}` },
    revoke: async () => {
      const revoked = await rig.platform.auth.app.inject({
        method: 'DELETE',
        url: `/api/v1/auth/keys/${made.json().key.id}`,
        headers,
      });
      expect(revoked.statusCode, revoked.body).toBe(200);
    },
  };
}

/** `curl` through the gateway: its status line's code and body. */
async function curl(path: string, args: string[] = []) {
  const { stdout } = await run('curl', ['-sS', '-o', '-', '-w', '\n%{http_code}', ...args, `${url}${path}`]);
  const cut = stdout.lastIndexOf('\n');
  return { status: Number(stdout.slice(cut + 1)), body: stdout.slice(0, cut) };
}

/** The options `gpu ssh-config` writes: through `gpu ssh-proxy`, the platform's host key pinned, one identity. */
function sshOptions(identity: string): string[] {
  const proxy = `${process.execPath} --import tsx ${root}tools/cli/src/main.ts ssh-proxy %h`;
  return [
    '-F',
    '/dev/null',
    '-o',
    `ProxyCommand=${proxy}`,
    '-o',
    'HostKeyAlias=gpu-platform',
    '-o',
    `UserKnownHostsFile=${knownHosts}`,
    '-o',
    'StrictHostKeyChecking=yes',
    '-o',
    'BatchMode=yes',
    '-o',
    'IdentitiesOnly=yes',
    '-i',
    identity,
  ];
}

/** `gpu`'s settings for the proxy: the gateway, an API key with `connect`. */
const sshEnv = (key: string) => ({
  ...process.env,
  GPU_URL: url,
  GPU_API_KEY: key,
  GPU_CONFIG_DIR: join(dir, 'gpu'),
});

/** OpenSSH's `ssh` or `scp` into the session, as `gpu ssh-config` sets it up. */
function ssh(program: 'ssh' | 'scp', args: string[], opts: { identity?: string; apiKey?: string } = {}) {
  return run(program, [...sshOptions(opts.identity ?? key), ...args], {
    cwd: root,
    timeout: 60_000,
    env: sshEnv(opts.apiKey ?? apiKey),
  }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

describe('a server inside the workload, reached through the platform', () => {
  it('serves HTTP through the gateway to the renter alone, with the prefix taken off', async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'mkdir -p /tmp/www/sub && cat > /tmp/www/hello.txt'], { input: 'hello, renter\n' });
    const server = await serve(
      r.id,
      ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www'],
      8000,
    );
    const auth = ['-H', `authorization: ${r.headers.authorization}`];
    const prefix = `/api/v1/billing/sessions/${r.id}/ports/8000`;
    expect(await curl(`${prefix}/hello.txt`, auth)).toEqual({ status: 200, body: 'hello, renter\n' });
    // The server's own redirect (a folder without its slash) comes back under the prefix.
    const redirect = await curl(`${prefix}/sub`, [...auth, '-D', '-']);
    expect(redirect.status).toBe(301);
    expect(redirect.body).toMatch(new RegExp(`location: ${prefix}/sub/\\r`, 'i'));
    // Its answers pass as they are: a method it does not serve.
    expect((await curl(`${prefix}/hello.txt`, [...auth, '-X', 'POST', '-d', 'x=1'])).status).toBe(501);
    expect((await curl(`${prefix}/hello.txt`)).status).toBe(401);
    const other = await rig.renter();
    const stranger = await curl(`${prefix}/hello.txt`, ['-H', `authorization: ${other.headers.authorization}`]);
    expect(stranger.status).toBe(404);
    expect(JSON.parse(stranger.body)).toMatchObject({ code: 'SESSION_NOT_FOUND' });
    const closed = await curl(`/api/v1/billing/sessions/${r.id}/ports/8001/`, auth);
    expect(closed.status).toBe(502);
    expect(JSON.parse(closed.body)).toMatchObject({ code: 'PORT_NOT_LISTENING' });
    expect((await curl(`/api/v1/billing/sessions/${r.id}/ports/70000/`, auth)).status).toBe(400);
    // The path goes as it came, still encoded: a name with a space, a slash inside one segment's name.
    await execIn(r.id, ['sh', '-c', 'cat > "/tmp/www/two words.txt"'], { input: 'spaced\n' });
    expect(await curl(`${prefix}/two%20words.txt`, auth)).toEqual({ status: 200, body: 'spaced\n' });
    expect((await curl(`${prefix}/sub%2Fnothing`, auth)).status).toBe(404);
    // Downloads the renter gives up on free their slots: more of them than the session's bound, then one more.
    await execIn(r.id, ['sh', '-c', 'head -c 20000000 /dev/zero > /tmp/www/big.bin']);
    for (let i = 0; i < 36; i += 1) {
      const stop = new AbortController();
      const res = await fetch(`${url}${prefix}/big.bin`, { headers: r.headers, signal: stop.signal });
      expect(res.status).toBe(200);
      await res.body?.getReader().read();
      stop.abort();
    }
    expect(
      await until(
        () => curl(`${prefix}/hello.txt`, auth),
        (x) => x.status === 200,
      ),
    ).toEqual({ status: 200, body: 'hello, renter\n' });
    // What passed is counted with the workload.
    const counted = await until(
      () => rig.workloadOf(r.headers, r.id),
      (w) => w.reach.bytes_out > 0 && w.reach.bytes_in > 0,
    );
    expect(counted.reach.bytes_out).toBeGreaterThan(14);
    // A server whose status HTTP has no place for (999) is a server that did not answer, never the platform's 500.
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/weird.py'], {
      input: [
        'import socket, sys',
        's = socket.socket()',
        's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
        "s.bind(('127.0.0.1', int(sys.argv[1])))",
        's.listen()',
        'while True:',
        '    c, _ = s.accept()',
        '    c.recv(65536)',
        "    c.sendall(b'HTTP/1.1 999 Weird\\r\\ncontent-length: 2\\r\\n\\r\\nhi')",
        '    c.close()',
        '',
      ].join('\n'),
    });
    const weird = await serve(r.id, ['python3', '/tmp/weird.py', '8002'], 8002);
    for (let i = 0; i < 3; i += 1) {
      const answer = await curl(`/api/v1/billing/sessions/${r.id}/ports/8002/`, auth);
      expect(answer.status, answer.body).toBe(502);
      expect(JSON.parse(answer.body)).toMatchObject({ code: 'PORT_NOT_ANSWERING' });
    }
    weird.close();
    server.close();
  });

  it('forwards connections to a port: raw streams and WebSockets, several at once, a WebSocket inside, none to the machine', async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/ws-echo.py'], {
      input: readFileSync(new URL('./fixtures/ws-echo.py', import.meta.url), 'utf8'),
    });
    await execIn(r.id, ['sh', '-c', 'mkdir -p /tmp/www && cat > /tmp/www/hello.txt'], { input: 'inside\n' });
    const http = await serve(
      r.id,
      ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www'],
      8000,
    );
    const echo = await serve(r.id, ['python3', '/tmp/ws-echo.py', '9000'], 9000);
    // Raw streams (what `gpu port-forward` opens; through the gateway too, the request's end passed as a half-close)
    // and WebSockets, at once.
    const answers = await Promise.all([
      ...[billingUrl, url, url].map(async (base) => {
        const opened = await rawForward(r.id, 8000, r.headers, base);
        expect(opened.status, JSON.stringify(opened.problem)).toBe(101);
        return exchangeRaw(opened.socket!, 'GET /hello.txt HTTP/1.0\r\n\r\n');
      }),
      ...[1, 2].map(async () => {
        const opened = await portForward(r.id, 8000, r.headers);
        expect(opened.status).toBe(101);
        return exchange(opened.ws!, 'GET /hello.txt HTTP/1.0\r\n\r\n');
      }),
    ]);
    for (const a of answers) expect(a).toMatch(/^HTTP\/1\.0 200 OK[\s\S]*\r\n\r\ninside\n$/);
    // A WebSocket client speaks to the server inside over the forwarded connection: on a raw stream through the
    // gateway, and on a port-forward WebSocket.
    const raw = await rawForward(r.id, 9000, r.headers, url);
    const opened = await portForward(r.id, 9000, r.headers);
    for (const tunnel of [raw.socket!, createWebSocketStream(opened.ws!)]) {
      const client = new WebSocket('ws://workload/', { createConnection: () => tunnel as never });
      await new Promise((resolve) => client.once('open', resolve));
      const big = Buffer.alloc(60_000, 9);
      const echoed = new Promise<Buffer>((resolve) => client.once('message', (d: Buffer) => resolve(d)));
      client.send(big);
      expect((await echoed).equals(big)).toBe(true);
      const said = new Promise<string>((resolve) => client.once('message', (d) => resolve(String(d))));
      client.send('ping through the platform');
      expect(await said).toBe('ping through the platform');
      client.close();
    }
    // Refusals: nothing there, a port that is none, another renter.
    expect(await portForward(r.id, 8001, r.headers)).toMatchObject({
      status: 502,
      problem: { code: 'PORT_NOT_LISTENING' },
    });
    expect(await rawForward(r.id, 8001, r.headers, url)).toMatchObject({
      status: 502,
      problem: { code: 'PORT_NOT_LISTENING' },
    });
    expect((await portForward(r.id, 0, r.headers)).status).toBe(400);
    expect((await portForward(r.id, 65536, r.headers)).status).toBe(400);
    expect((await rawForward(r.id, 65536, r.headers)).status).toBe(400);
    const other = await rig.renter();
    expect(await portForward(r.id, 8000, other.headers)).toMatchObject({ status: 404 });
    expect(await rawForward(r.id, 8000, other.headers, url)).toMatchObject({ status: 404 });
    expect(await rawForward(r.id, 8000, {}, url)).toMatchObject({ status: 401 });
    // A request that asks for no upgrade opens nothing: 426 before the workload is reached.
    const plain = await fetch(`${billingUrl}/api/v1/billing/sessions/${r.id}/port-forward?port=8000`, {
      headers: r.headers,
    });
    expect(plain.status).toBe(426);
    expect(await plain.json()).toMatchObject({ code: 'UPGRADE_REQUIRED' });
    expect(plain.headers.get('upgrade')).toBe('tcp, websocket');
    // Only a forwarded port takes a raw stream: an exec stream is a WebSocket.
    const execRaw = await openRawUpgrade(`${billingUrl}/api/v1/billing/sessions/${r.id}/exec?command=true`, {
      headers: r.headers,
    }).catch((e: unknown) => e);
    expect(execRaw).toBeInstanceOf(UpgradeRefused);
    expect((execRaw as UpgradeRefused).problem()).toMatchObject({ status: 400, code: 'UPGRADE_NOT_SUPPORTED' });
    http.close();
    echo.close();
  });

  it('passes a forwarded connection reaching another billing instance to the one holding the machine', async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'mkdir -p /tmp/www && cat > /tmp/www/hello.txt'], { input: 'via the holder\n' });
    const server = await serve(
      r.id,
      ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www'],
      8000,
    );
    const second = await rig.secondBilling();
    const secondUrl = second.url;
    try {
      const opened = await portForward(r.id, 8000, r.headers, secondUrl);
      expect(opened.status).toBe(101);
      expect(await exchange(opened.ws!, 'GET /hello.txt HTTP/1.0\r\n\r\n')).toMatch(/\r\n\r\nvia the holder\n$/);
      const raw = await rawForward(r.id, 8000, r.headers, secondUrl);
      expect(raw.status).toBe(101);
      expect(await exchangeRaw(raw.socket!, 'GET /hello.txt HTTP/1.0\r\n\r\n')).toMatch(/\r\n\r\nvia the holder\n$/);
      for (const refused of [
        await portForward(r.id, 8001, r.headers, secondUrl),
        await rawForward(r.id, 8001, r.headers, secondUrl),
      ]) {
        expect(refused).toMatchObject({ status: 502, problem: { code: 'PORT_NOT_LISTENING' } });
      }
    } finally {
      await second.close();
      server.close();
    }
  });

  it("passes a daemon's dial-back reaching another billing instance to the one holding the machine", async () => {
    const r = await idleSession();
    const second = await rig.secondBilling();
    // A balancer in front of the two instances: the daemon's connection goes to the first, its dial-backs to the
    // second (each WebSocket is a TCP connection of its own, routed by its request line).
    const dials: string[] = [];
    const balancer = net.createServer((client) => {
      client.once('data', (first: Buffer) => {
        const dial = first.toString('latin1').startsWith('GET /api/v1/billing/reach/dial?');
        if (dial) dials.push(first.toString('latin1').split('\r\n')[0]!);
        const to = new URL(dial ? second.url : billingUrl);
        const upstream = net.connect(Number(to.port), to.hostname, () => upstream.write(first));
        client.pipe(upstream).pipe(client);
        const both = () => {
          client.destroy();
          upstream.destroy();
        };
        client.on('error', both);
        upstream.on('error', both);
      });
    });
    await new Promise<void>((resolve) => balancer.listen(0, '127.0.0.1', resolve));
    let secondClosed = false;
    // (A daemon's link that stops ends what was run over it: the server starts over the new one.)
    await link.stop();
    const balanced = startLink({
      ...machine.deps.config,
      billing_url: `http://127.0.0.1:${(balancer.address() as net.AddressInfo).port}`,
    });
    let server: { close(): void } | undefined;
    try {
      // Once the daemon's new connection is in.
      await until(
        () =>
          execIn(r.id, ['true']).then(
            () => true,
            () => false,
          ),
        (ok) => ok,
      );
      await execIn(r.id, ['sh', '-c', 'mkdir -p /tmp/www && cat > /tmp/www/hello.txt'], { input: 'dialled back\n' });
      server = await serve(
        r.id,
        ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www'],
        8000,
      );
      const dialsBefore = dials.length;
      const opened = await portForward(r.id, 8000, r.headers);
      expect(opened.status, JSON.stringify(opened.problem)).toBe(101);
      expect(await exchange(opened.ws!, 'GET /hello.txt HTTP/1.0\r\n\r\n')).toMatch(/\r\n\r\ndialled back\n$/);
      expect(dials).toHaveLength(dialsBefore + 1);
      // A ticket no instance awaits (one used already) is refused, at the second instance and at the holder alike.
      const reused = dials.at(-1)!.split(' ')[1]!;
      const daemonHeaders = { authorization: `Bearer ${await machine.deps.token.get()}` };
      for (const base of [second.url, billingUrl]) {
        const refused = await openRawUpgrade(`${base}${reused}`, { headers: daemonHeaders }).catch((e: unknown) => e);
        expect(refused, base).toBeInstanceOf(UpgradeRefused);
        expect((refused as UpgradeRefused).status, base).toBe(404);
        expect((refused as UpgradeRefused).problem(), base).toMatchObject({ code: 'DIAL_NOT_FOUND' });
      }
      // The dial-back is a raw stream only: a WebSocket there is told to upgrade to one.
      expect(await connect(`${billingUrl}${reused}`, daemonHeaders)).toMatchObject({
        status: 426,
        problem: { code: 'UPGRADE_REQUIRED' },
      });
      // A dial-back passed on stays open as long as its stream, and ends when the instance passing it stops (it does
      // not hold the stop back for its shutdown timeout).
      const idle = await rawForward(r.id, 8000, r.headers);
      expect(idle.status).toBe(101);
      expect(dials).toHaveLength(dialsBefore + 2);
      const idleEnded = new Promise<void>((resolve) => idle.socket!.once('end', () => resolve()));
      idle.socket!.resume();
      const stopping = Date.now();
      await second.close();
      secondClosed = true;
      // Not held by the open stream (here no shutdown timeout would cut it: held, the close would wait for as long as
      // the stream stays open); the bound leaves a busy machine room.
      expect(Date.now() - stopping).toBeLessThan(30_000);
      await idleEnded;
    } finally {
      await balanced.stop();
      link = startLink(machine.deps.config);
      balancer.close();
      if (!secondClosed) await second.close();
      server?.close();
      // The daemon's own connection back before the next test.
      await until(
        () =>
          execIn(r.id, ['true']).then(
            () => true,
            () => false,
          ),
        (ok) => ok,
      );
      // The machine's GPUs are few: this test's go back.
      await rig.endSession(r.headers, r.id);
    }
  });

  it("passes a WebSocket to a port on, answered by the workload's server, through the gateway and another instance", async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/ws-echo.py'], {
      input: readFileSync(new URL('./fixtures/ws-echo.py', import.meta.url), 'utf8'),
    });
    const echo = await serve(r.id, ['python3', '/tmp/ws-echo.py', '9000'], 9000);
    /** A WebSocket to the port's URL (as a notebook's page opens its kernel's): 101 and what the server told back. */
    const open = (base: string, headers: Record<string, string>, port = 9000) =>
      connect(`${base}/api/v1/billing/sessions/${r.id}/ports/${port}/api/kernels/k1/channels?s=1`, headers, [
        'v1.kernel.websocket.jupyter.org',
        'other',
      ]);
    const roundTrip = async (ws: WebSocket, message: string | Buffer) => {
      const echoed = new Promise<Buffer>((resolve) => ws.once('message', (d: Buffer) => resolve(d)));
      ws.send(message);
      return echoed;
    };
    const opened = await open(url, r.headers);
    expect(opened.status).toBe(101);
    // The server chose the subprotocol; it saw the path after the port, and never the renter's credentials.
    expect(opened.ws!.protocol).toBe('v1.kernel.websocket.jupyter.org');
    expect(opened.told).toMatchObject({ 'x-echo-path': '/api/kernels/k1/channels?s=1', 'x-echo-authorization': 'no' });
    expect(String(await roundTrip(opened.ws!, 'execute_request'))).toBe('execute_request');
    const large = Buffer.alloc(60_000, 7);
    expect((await roundTrip(opened.ws!, large)).equals(large)).toBe(true);
    // Through another billing instance: passed to the one holding the machine's connection.
    const second = await rig.secondBilling();
    const secondUrl = second.url;
    try {
      const via = await open(secondUrl, r.headers);
      expect(via.status).toBe(101);
      expect(String(await roundTrip(via.ws!, 'via the holder'))).toBe('via the holder');
      via.ws!.close();
    } finally {
      await second.close();
    }
    // Refused before anything is passed on, as a plain answer: no credentials, another renter, nothing there.
    expect((await open(url, {})).status).toBe(401);
    // A refused upgrade's connection is closed by the platform, whatever the caller does (a stranger cannot keep
    // sockets open by asking for upgrades it may not have).
    const stranger = net.connect(Number(new URL(billingUrl).port), '127.0.0.1');
    const heard: Buffer[] = [];
    stranger.on('data', (d: Buffer) => heard.push(d));
    const hungUp = new Promise((resolve) => stranger.once('close', resolve));
    stranger.write(
      `GET /api/v1/billing/sessions/${r.id}/ports/9000/ HTTP/1.1\r\nHost: billing\r\nConnection: Upgrade\r\n` +
        'Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    await hungUp;
    expect(String(Buffer.concat(heard))).toMatch(/^HTTP\/1\.1 401 /);
    const other = await rig.renter();
    expect(await open(url, other.headers)).toMatchObject({ status: 404, problem: { code: 'SESSION_NOT_FOUND' } });
    expect(await open(url, r.headers, 9001)).toMatchObject({ status: 502, problem: { code: 'PORT_NOT_LISTENING' } });
    // Counted with the workload once closed, and cut when the session ends.
    opened.ws!.close();
    const counted = await until(
      () => rig.workloadOf(r.headers, r.id),
      (w) => w.reach.bytes_in > 60_000 && w.reach.bytes_out > 60_000,
    );
    expect(counted.reach.bytes_out).toBeGreaterThan(60_000);
    const last = await open(url, r.headers);
    expect(last.status).toBe(101);
    const closed = new Promise<number>((resolve) => last.ws!.once('close', (code) => resolve(code)));
    const ended = await rig.endSession(r.headers, r.id);
    expect(ended.statusCode, ended.body).toBe(200);
    // The connection is cut: no closing handshake (1006).
    expect(await closed).toBe(1006);
    echo.close();
  });

  it('cuts a forwarded connection when its session ends', async () => {
    const r = await idleSession();
    const server = await serve(r.id, ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/'], 8000);
    const opened = await portForward(r.id, 8000, r.headers);
    const closed = new Promise<number>((resolve) => opened.ws!.once('close', (code) => resolve(code)));
    const raw = await rawForward(r.id, 8000, r.headers, url);
    expect(raw.status).toBe(101);
    // Its end comes (the gateway passes the cut as the stream's end).
    const rawClosed = new Promise<void>((resolve) => raw.socket!.once('end', () => resolve()));
    raw.socket!.resume();
    const endedAt = Date.now();
    const ended = await rig.endSession(r.headers, r.id);
    expect(ended.statusCode, ended.body).toBe(200);
    // Closed by the relay (1001, the session ended) or, first, by the workload's end (1000): closed either way.
    expect([1000, 1001]).toContain(await closed);
    await rawClosed;
    // Ended by the session's end (checked every 200 ms here); the bound leaves a busy machine room.
    expect(Date.now() - endedAt).toBeLessThan(30_000);
    expect(await portForward(r.id, 8000, r.headers)).toMatchObject({
      status: 409,
      problem: { code: 'SESSION_NOT_ACTIVE' },
    });
    server.close();
  });
});

describe("a browser at a workload port's own origin", () => {
  /** `curl` to a port host (`<session>-<port>.ports.localhost`) through the gateway: status, headers and body. */
  async function atHost(host: string, path: string, args: string[] = []) {
    const gateway = new URL(url);
    const { stdout } = await run('curl', [
      '-sS',
      '-D',
      '-',
      '-o',
      '-',
      '-w',
      '\n%{http_code}',
      '--connect-to',
      `${host}:80:127.0.0.1:${gateway.port}`,
      ...args,
      `http://${host}${path}`,
    ]);
    const cut = stdout.lastIndexOf('\n');
    const [head = '', ...rest] = stdout.slice(0, cut).split('\r\n\r\n');
    return { status: Number(stdout.slice(cut + 1)), head, body: rest.join('\r\n\r\n') };
  }
  const header = (head: string, name: string) => new RegExp(`^${name}: (.*)$`, 'im').exec(head)?.[1]?.trim();
  const linkFor = (sessionId: string, port: number, headers: Record<string, string>) =>
    rig.billing.app.inject({
      method: 'POST',
      url: `/api/v1/billing/sessions/${sessionId}/port-links`,
      headers,
      payload: { port },
    });
  /** Opens a link as a browser does: its cookie, once traded for the ticket. */
  async function signIn(sessionId: string, port: number, headers: Record<string, string>) {
    const made = await linkFor(sessionId, port, headers);
    expect(made.statusCode, made.body).toBe(201);
    const link = new URL(made.json().url);
    const opened = await atHost(link.hostname, `${link.pathname}${link.search}`);
    expect(opened.status, opened.body).toBe(303);
    return { link, opened, cookie: header(opened.head, 'set-cookie')!.split(';')[0]! };
  }

  it("opens a link once, then serves the port at its own host to that browser alone, the workload's as it came", async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/echo-headers.py'], {
      input: readFileSync(new URL('./fixtures/echo-headers.py', import.meta.url), 'utf8'),
    });
    const server = await serve(r.id, ['python3', '/tmp/echo-headers.py', '8000'], 8000);
    const host = `${r.id}-8000.ports.localhost`;
    const made = await linkFor(r.id, 8000, r.headers);
    expect(made.statusCode, made.body).toBe(201);
    expect(made.json().url).toMatch(new RegExp(`^http://${host}/\\?gpu-port-ticket=[A-Za-z0-9_-]{43}$`));
    expect(made.json().origin).toBe(`http://${host}`);
    const link = new URL(made.json().url);
    const opened = await atHost(host, `/?x=1&${link.search.slice(1)}`);
    // Sent on without the ticket, with a cookie of that host's alone.
    expect(opened.status).toBe(303);
    expect(header(opened.head, 'location')).toBe('/?x=1');
    const setCookie = header(opened.head, 'set-cookie')!;
    expect(setCookie).toMatch(/^gpu_port_grant=[A-Za-z0-9_-]{43}; Path=\/; Expires=.+; HttpOnly; SameSite=Lax$/);
    expect(setCookie).not.toMatch(/Domain=/i);
    const cookie = setCookie.split(';')[0]!;
    // The link opens once.
    const again = await atHost(host, `/${link.search}`);
    expect(again.status).toBe(401);
    expect(JSON.parse(again.body)).toMatchObject({ code: 'PORT_LINK_INVALID' });
    // Every path is the workload's (the platform's own `/health` too), as sent; the grant's cookie is taken out, the
    // workload's own cookies and Authorization pass.
    const echoed = await atHost(host, '/health/a%2Fb?q=1', [
      '-H',
      `cookie: theme=dark; ${cookie}; session=abc`,
      '-H',
      'authorization: Token workload-own',
    ]);
    expect(echoed.status, echoed.body).toBe(200);
    expect(echoed.body.split('\n')).toEqual([
      '/health/a%2Fb?q=1',
      'cookie=theme=dark; session=abc',
      'authorization=Token workload-own',
      `host=${host}`,
    ]);
    // A body past the platform's JSON limit passes (an upload to a notebook).
    const upload = join(dir, 'upload.bin');
    writeFileSync(upload, Buffer.alloc(3 * 1024 * 1024, 1));
    const posted = await atHost(host, '/upload', [
      '-H',
      `cookie: ${cookie}`,
      '-H',
      'expect:',
      '--data-binary',
      `@${upload}`,
    ]);
    expect(posted.status).toBe(200);
    expect(posted.body.split('\n')[0]).toBe('/upload');
    // Its WebSockets pass too (a notebook's kernels).
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/ws-echo.py'], {
      input: readFileSync(new URL('./fixtures/ws-echo.py', import.meta.url), 'utf8'),
    });
    const echo = await serve(r.id, ['python3', '/tmp/ws-echo.py', '9000'], 9000);
    const wsGrant = await signIn(r.id, 9000, r.headers);
    const ws = await connect(`${url}/api/kernels/k1/channels`, {
      host: wsGrant.link.host,
      cookie: wsGrant.cookie,
    });
    expect(ws.status).toBe(101);
    expect(ws.told).toMatchObject({ 'x-echo-path': '/api/kernels/k1/channels' });
    const heard = new Promise<string>((resolve) => ws.ws!.once('message', (d) => resolve(String(d))));
    ws.ws!.send('kernel message');
    expect(await heard).toBe('kernel message');
    ws.ws!.close();

    // No cookie, or the cookie of another port's host: no way in.
    const bare = await atHost(host, '/');
    expect(bare.status).toBe(401);
    expect(JSON.parse(bare.body)).toMatchObject({ code: 'PORT_SIGN_IN_REQUIRED' });
    expect((await atHost(`${r.id}-9000.ports.localhost`, '/', ['-H', `cookie: ${cookie}`])).status).toBe(401);
    expect((await atHost(host, '/', ['-H', 'cookie: gpu_port_grant=forged'])).status).toBe(401);
    // Another origin's page (another workload's port host is the same site) sends no request here with the cookie;
    // a link followed from there is a navigation, and opens.
    const fromElsewhere = ['-H', `cookie: ${cookie}`, '-H', 'sec-fetch-site: same-site'];
    const fetched = await atHost(host, '/', [...fromElsewhere, '-H', 'sec-fetch-mode: cors']);
    expect(fetched.status).toBe(403);
    expect(JSON.parse(fetched.body)).toMatchObject({ code: 'CROSS_ORIGIN_REQUEST' });
    expect((await atHost(host, '/', [...fromElsewhere, '-H', 'sec-fetch-mode: navigate'])).status).toBe(200);
    // A form's POST from there is a navigation too, and the cookie (SameSite=Lax) goes with it from a sibling host.
    const formPost = ['-H', 'sec-fetch-mode: navigate', '--data-binary', 'x'];
    expect((await atHost(host, '/upload', [...fromElsewhere, ...formPost])).status).toBe(403);
    // A browser that sends no Sec-Fetch headers: the Origin of its POST says where it came from.
    const posting = (origin: string) =>
      atHost(host, '/upload', ['-H', `cookie: ${cookie}`, '-H', `origin: ${origin}`, '--data-binary', 'x']);
    expect((await posting(`http://${r.id}-9000.ports.localhost`)).status).toBe(403);
    expect((await posting(`http://${host}`)).status).toBe(200);
    // A cookie of the grant's name that another host's page set for the whole ports domain is passed over.
    expect((await atHost(host, '/', ['-H', `cookie: gpu_port_grant=planted; ${cookie}`])).status).toBe(200);
    // The workload's own cookies stay on its host: no `Domain`, and none named as the grant.
    const setting = await atHost(host, '/set-cookie', ['-H', `cookie: ${cookie}`]);
    expect(setting.status).toBe(200);
    expect(setting.head).toMatch(/^set-cookie: theme=dark; Path=\/\s*$/im);
    expect(setting.head).not.toMatch(/domain=|planted/i);
    // A link's path never sends the browser to another host (`//elsewhere` is one to a browser).
    const crafted = new URL((await linkFor(r.id, 8000, r.headers)).json().url);
    const away = await atHost(host, `//elsewhere.example/x${crafted.search}`);
    expect(away.status).toBe(303);
    expect(header(away.head, 'location')).toBe('/elsewhere.example/x');
    // Only the renter makes links; a port outside 1-65535 is none.
    const other = await rig.renter();
    expect((await linkFor(r.id, 8000, other.headers)).json()).toMatchObject({ code: 'SESSION_NOT_FOUND' });
    expect((await linkFor(r.id, 70000, r.headers)).statusCode).toBe(400);
    // A malformed port host, and the port-host route asked for on the platform's own host: no route.
    expect((await atHost('nothing.ports.localhost', '/')).status).toBe(404);
    expect((await curl('/api/v1/billing/port-host/x', ['-H', `cookie: ${cookie}`])).status).toBe(404);
    // The session's end closes the port to the browser.
    const ended = await rig.endSession(r.headers, r.id);
    expect(ended.statusCode, ended.body).toBe(200);
    const after = await atHost(host, '/', ['-H', `cookie: ${cookie}`]);
    expect(after.status).toBe(409);
    expect(JSON.parse(after.body)).toMatchObject({ code: 'SESSION_NOT_ACTIVE' });
    expect((await linkFor(r.id, 8000, r.headers)).json()).toMatchObject({ code: 'SESSION_NOT_ACTIVE' });
    server.close();
    echo.close();
  });

  it("ends a browser's access once the API key its link was made with is revoked", async () => {
    const r = await idleSession();
    await execIn(r.id, ['sh', '-c', 'cat > /tmp/echo-headers.py'], {
      input: readFileSync(new URL('./fixtures/echo-headers.py', import.meta.url), 'utf8'),
    });
    const server = await serve(r.id, ['python3', '/tmp/echo-headers.py', '8000'], 8000);
    const key = await connectKey(r.headers, 'browser-link');
    const { link, cookie } = await signIn(r.id, 8000, key.headers);
    expect((await atHost(link.hostname, '/', ['-H', `cookie: ${cookie}`])).status).toBe(200);
    await key.revoke();
    // Refused once the platform has asked the auth service again (it asks at most every 5 s).
    const refused = await until(
      () => atHost(link.hostname, '/', ['-H', `cookie: ${cookie}`]),
      (x) => x.status === 401,
      30_000,
    );
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'PORT_SIGN_IN_REQUIRED' });
    server.close();
  });
});

describe('a stream lives as long as the credential that opened it', () => {
  it('closes at the next check after its API key is revoked (every 500 ms)', async () => {
    const r = await idleSession();
    const server = await serve(r.id, ['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/'], 8000);
    const key = await connectKey(r.headers, 'revoked-soon');
    const opened = await portForward(r.id, 8000, key.headers);
    expect(opened.status).toBe(101);
    const closed = new Promise<number>((resolve) => opened.ws!.once('close', (code) => resolve(code)));
    await key.revoke();
    const revokedAt = Date.now();
    expect(await closed).toBe(1001);
    // Within a second here as a rule (a check every 500 ms, each asking the auth service); a busy machine stretches
    // the checks, and nothing else would ever close it (a stream outlives its token): 30 s tells the two apart.
    expect(Date.now() - revokedAt).toBeLessThan(30_000);
    // The renter's own sign-in still opens streams.
    expect((await portForward(r.id, 8000, r.headers)).status).toBe(101);
    server.close();
  });
});

describe("OpenSSH into the workload with the renter's key", () => {
  it('runs a command and copies files both ways with scp', async () => {
    const r = await idleSession();
    const res = await ssh('ssh', [`workload@${r.id}`, 'echo "hi from $(hostname) as $(id -u)"; exit 7']);
    expect(res.stdout).toMatch(/^hi from workload as \d+\n$/);
    expect(res.code).toBe(7);
    const local = join(dir, 'up.bin');
    const content = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) % 251));
    writeFileSync(local, content);
    const up = await ssh('scp', [local, `workload@${r.id}:/tmp/up.bin`]);
    expect(up.code, up.stderr).toBe(0);
    const sum = await ssh('ssh', [`workload@${r.id}`, 'sha256sum /tmp/up.bin']);
    const { createHash } = await import('node:crypto');
    expect(sum.stdout.split(' ')[0]).toBe(createHash('sha256').update(content).digest('hex'));
    const back = join(dir, 'down.bin');
    const down = await ssh('scp', [`workload@${r.id}:/tmp/up.bin`, back]);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(back).equals(content)).toBe(true);
  });

  it('gives a terminal driven as a person would: its size followed, Ctrl-C to its program, its exit status', async () => {
    const r = await idleSession();
    const socket = join(dir, `tmux-${r.id.slice(0, 8)}`);
    const tmux = (...args: string[]) => run('tmux', ['-S', socket, ...args], { env: sshEnv(apiKey) });
    const screen = async () => (await tmux('capture-pane', '-p', '-t', 't')).stdout;
    const shows = (text: RegExp) => until(screen, (s) => text.test(s), 30_000);
    const command = ['ssh', ...sshOptions(key), '-tt', `workload@${r.id}`].map((a) => `'${a}'`).join(' ');
    await tmux('new-session', '-d', '-s', 't', '-x', '100', '-y', '30', `${command}; echo "ssh-exit=$?"; sleep 60`);
    try {
      await shows(/\$ $/m);
      await tmux('send-keys', '-t', 't', 'stty size', 'Enter');
      expect(await shows(/^30 100$/m)).toMatch(/^30 100$/m);
      await tmux('resize-window', '-t', 't', '-x', '120', '-y', '40');
      await tmux('send-keys', '-t', 't', 'clear; stty size', 'Enter');
      expect(await shows(/^40 120$/m)).toMatch(/^40 120$/m);
      await tmux('send-keys', '-t', 't', 'clear; sleep 100', 'Enter');
      await until(
        () => execIn(r.id, ['sh', '-c', 'pgrep -x sleep | wc -l']).then((x) => Number(x.out.trim())),
        (n) => n >= 2,
      );
      await tmux('send-keys', '-t', 't', 'C-c');
      await tmux('send-keys', '-t', 't', 'echo "rc=$?"', 'Enter');
      expect(await shows(/^rc=130$/m)).toMatch(/^rc=130$/m);
      await tmux('send-keys', '-t', 't', 'exit 3', 'Enter');
      expect(await shows(/^ssh-exit=3$/m)).toMatch(/^ssh-exit=3$/m);
    } finally {
      await tmux('kill-server').catch(() => {});
    }
  });

  it('refuses a key the renter never registered, and another renter', async () => {
    const r = await idleSession();
    const unknownKey = await ssh('ssh', [`workload@${r.id}`, 'true'], { identity: strangerKey });
    expect(unknownKey.code).toBe(255);
    expect(unknownKey.stderr).toMatch(/Permission denied \(publickey\)/);
    const other = await rig.renter();
    const made = await rig.platform.auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/keys',
      headers: other.headers,
      payload: { name: 'other', scopes: ['connect'] },
    });
    const stranger = await ssh('ssh', [`workload@${r.id}`, 'true'], { apiKey: made.json().api_key });
    expect(stranger.code).toBe(255);
    expect(stranger.stderr).toMatch(/SESSION_NOT_FOUND/);
  });
});
