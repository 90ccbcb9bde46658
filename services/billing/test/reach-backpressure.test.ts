/**
 * What billing holds for a renter who reads nothing (domain/reach): a program on the machine (a real SSH server, as
 * the daemon is) writes as fast as it may, to its standard output or its standard error, and the renter's side (a
 * real WebSocket whose client stops reading) takes nothing. The relay must stop taking the machine's output once a
 * bounded amount waits for the renter, however the renter's own SSH client sets its window: otherwise one renter's
 * `yes >&2` fills the service's memory.
 */
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createLogger } from '@gpu/common';
import ssh2, { type ClientChannel } from 'ssh2';
import { afterEach, describe, expect, it } from 'vitest';
import { createWebSocketStream, WebSocket, WebSocketServer } from 'ws';
import { bridge } from '../src/domain/reach/channels.ts';
import { ByteMeter } from '../src/domain/reach/meter.ts';
import type { Link, ReachRelay } from '../src/domain/reach/relay.ts';
import { serveRenterSsh } from '../src/domain/reach/ssh.ts';

const MIB = 1024 * 1024;
/** Far above what the relay may hold (a few MiB, and the windows and socket buffers on the way), far below a flood. */
const BOUND = 32 * MIB;

const pem = () =>
  generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey.export({ type: 'sec1', format: 'pem' }).toString();

const closing: (() => void)[] = [];
afterEach(() => {
  for (const close of closing.splice(0)) close();
});

/**
 * The machine: an SSH server whose every program writes to `which` as fast as its window allows (up to 1 GiB); the
 * relay's connection to it, and how many bytes it has written.
 */
async function machine(which: 'stdout' | 'stderr', total = 1024 * MIB) {
  let sent = 0;
  const server = new ssh2.Server({ hostKeys: [pem()] }, (client) => {
    client.on('error', () => {});
    client.on('authentication', (ctx) => ctx.accept());
    client.on('session', (accept) =>
      accept().on('exec', (acceptExec) => {
        const channel = acceptExec();
        channel.on('error', () => {});
        const out = which === 'stdout' ? channel : channel.stderr;
        const pump = () => {
          while (sent < total) {
            sent += 64 * 1024;
            if (!out.write(Buffer.alloc(64 * 1024, 0x79))) return void out.once('drain', pump);
          }
        };
        pump();
      }),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const ssh = new ssh2.Client();
  ssh.on('error', () => {});
  ssh.connect({
    host: '127.0.0.1',
    port: (server.address() as AddressInfo).port,
    username: 'daemon',
    hostVerifier: () => true,
  });
  await once(ssh, 'ready');
  closing.push(() => {
    ssh.end();
    server.close();
  });
  const exec = () =>
    new Promise<ClientChannel>((resolve, reject) =>
      ssh.exec('program', (err, channel) => (err ? reject(err) : resolve(channel))),
    );
  return { ssh, exec, sent: () => sent };
}

/** A WebSocket server on loopback whose connections `serve` takes; its URL. */
async function relaySide(serve: (socket: import('ws').WebSocket) => void): Promise<string> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await once(wss, 'listening');
  wss.on('connection', serve);
  closing.push(() => {
    for (const client of wss.clients) client.terminate();
    wss.close();
  });
  return `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`;
}

/** Waits until the machine has sent nothing more for half a second (20 s at most); what it sent by then. */
async function settled(sent: () => number): Promise<number> {
  const deadline = Date.now() + 20_000;
  let last = -1;
  while (Date.now() < deadline) {
    const now = sent();
    if (now === last && now > 0) return now;
    last = now;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  return sent();
}

/** A renter's SSH connection through the relay (`serveRenterSsh`, over `meter`) to machine `m`, and one exec on it. */
async function renterSsh(m: Awaited<ReturnType<typeof machine>>, meter: ByteMeter) {
  const renterKey = ssh2.utils.generateKeyPairSync('ed25519');
  const link = { ssh: m.ssh, closed: new Promise<void>(() => {}) } as unknown as Link;
  const relay = { exec: () => m.exec() } as unknown as ReachRelay;
  const url = await relaySide((socket) => {
    serveRenterSsh(
      socket,
      { sessionId: 'session', link },
      {
        relay,
        hostKey: pem(),
        keys: Promise.resolve([renterKey.public]),
        logger: createLogger({ service: 'reach-test', instanceId: 't', level: 'silent' }),
        admit: () => () => {},
        meter,
      },
    );
  });
  const socket = new WebSocket(url);
  // The stream from the start: the relay's SSH server speaks first, maybe in the same read as the upgrade.
  const sock = createWebSocketStream(socket);
  const client = new ssh2.Client();
  client.on('error', () => {});
  client.connect({
    sock: sock as never,
    username: 'renter',
    privateKey: renterKey.private,
    hostVerifier: () => true,
  });
  await once(client, 'ready');
  closing.push(() => client.end());
  const channel = await new Promise<ClientChannel>((resolve, reject) =>
    client.exec('yes', (err, ch) => (err ? reject(err) : resolve(ch))),
  );
  return { socket, client, channel };
}

describe('a renter who reads nothing', () => {
  for (const which of ['stdout', 'stderr'] as const) {
    it(`holds back a program's ${which} on an exec stream once a bounded amount waits`, async () => {
      const m = await machine(which);
      const channel = await m.exec();
      const url = await relaySide((socket) => {
        bridge(socket, channel, { tty: false, meter: new ByteMeter(0) });
      });
      const renter = new WebSocket(url);
      await once(renter, 'open');
      renter.pause();
      const sent = await settled(m.sent);
      expect(sent).toBeGreaterThan(0);
      expect(sent).toBeLessThan(BOUND);
    });
  }

  it("holds the program's output on the renter's SSH connection to the session's bytes a second", async () => {
    // 4 MiB at 1 MiB a second, a second's worth at once: at no moment has the renter more than a MiB and the seconds
    // since the meter started (a frame through the relay is whole turns of SSH packets, up to a MiB: it is paid for
    // before it leaves), so the last byte arrives three seconds after the start at the earliest, however fast the
    // machine writes. (The clock starts before the meter: output flows, and waits in the client's window, before the
    // exec's callback runs, the longer the busier the machine.)
    const m = await machine('stdout', 4 * MIB);
    const started = Date.now();
    const { channel } = await renterSsh(m, new ByteMeter(MIB));
    let read = 0;
    let ahead = 0;
    channel.on('data', (d: Buffer) => {
      read += d.length;
      ahead = Math.max(ahead, read - MIB * (1 + (Date.now() - started) / 1000));
    });
    await expect.poll(() => read, { timeout: 30_000 }).toBeGreaterThanOrEqual(4 * MIB);
    expect(ahead).toBeLessThanOrEqual(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3000);
  });

  for (const forged of [false, true]) {
    it(`holds back a program's output on the renter's SSH connection${forged ? ', whatever window their client grants' : ''}`, async () => {
      const m = await machine('stdout');
      const { socket, client, channel } = await renterSsh(m, new ByteMeter(0));
      if (forged) {
        // The renter's own client may grant any window (RFC 4254: up to 2^32 - 1 bytes) and then read nothing.
        const own = channel as unknown as { outgoing: { id: number }; incoming: { window: number } };
        const protocol = (client as unknown as { _protocol: { channelWindowAdjust(id: number, n: number): void } })
          ._protocol;
        protocol.channelWindowAdjust(own.outgoing.id, 0xffffffff - own.incoming.window);
      }
      socket.pause();
      const sent = await settled(m.sent);
      expect(sent).toBeGreaterThan(0);
      expect(sent).toBeLessThan(BOUND);
    });
  }
});
