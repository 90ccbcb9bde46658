/**
 * Renters' own SSH into the workloads they rent (`ssh`, `scp`, `rsync`, editors' remote SSH, with OpenSSH's client):
 * the relay is their SSH server (`ssh2`), reached through a WebSocket (`GET .../sessions/{id}/ssh`, which
 * `gpu ssh-proxy`, OpenSSH's `ProxyCommand`, carries), and each of their channels becomes a channel on the machine's
 * own connection (relay.ts), so the workload, never the machine, is what they reach.
 *
 * - **Who:** the WebSocket was opened by the session's renter (their sign-in or an API key with `connect`); SSH then
 *   takes only a public key that the same user registered with the auth service (`gpu ssh-key add`), read afresh for
 *   each connection. Any user name is accepted: the session says where, the key says who.
 * - **What:** a shell (a login shell, bash where the workload has it), a command (`sh -c`, as OpenSSH runs one), the
 *   `sftp` subsystem (the workload's `sftp-server`: `scp` and `sftp` copy files through it; `rsync` runs the
 *   workload's own), terminals, window changes, signals and the variables OpenSSH sends (`LANG`, `LC_*`), and
 *   `direct-tcpip` to the workload's own loopback (`ssh -L`, editors' servers). Nothing else: no agent or X11
 *   forwarding, no `ssh -R`.
 * - **Host key:** one for the platform (`reach.ssh_host_key`, else one made once and kept in the database), served by
 *   every instance, published at `GET /api/v1/billing/reach/ssh-host-key` for `gpu ssh-config` to pin.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { coalesceWrites, type Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
// ssh2 is CommonJS: its classes through the default export (a named import fails outside a bundler).
import ssh2, { type ClientChannel, type Connection, type ParsedKey, type ServerChannel, type Session } from 'ssh2';
import { createWebSocketStream, type WebSocket } from 'ws';
import { reachHostKey } from '../../db/reach-link-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { hold, programOutput } from './channels.ts';
import type { ByteMeter } from './meter.ts';
import type { Link, ReachRelay } from './relay.ts';

/** A login shell: bash where the workload has it, else sh (what `gpu shell` runs too). */
const LOGIN_SHELL = ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'];

/** The workload's `sftp-server`, wherever its distribution keeps it. */
const SFTP_SERVER = [
  '/bin/sh',
  '-c',
  'for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server ' +
    '/usr/libexec/sftp-server /usr/lib/sftp-server; do [ -x "$p" ] && exec "$p"; done; ' +
    'echo "gpu: the workload has no sftp-server (install openssh-sftp-server, or copy with scp -O)" >&2; exit 127',
];

/** The variables a client may send (OpenSSH's `SendEnv LANG LC_*`), and how many. */
const ENV_NAME = /^(LANG|LANGUAGE|LC_[A-Z]{1,24}|COLORTERM)$/;
const MAX_ENV = 32;

/** A terminal's width or height, within what a terminal has (as the exec route takes them). */
const clampSize = (n: number, otherwise: number) => Math.min(1000, Math.max(1, Math.trunc(n) || otherwise));
/** Where `direct-tcpip` may go: the workload's own loopback. */
const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', 'ip6-localhost']);

/** The platform's SSH host key, as `reach.ssh_host_key` names it or as kept in the database. */
export class HostKey {
  private key: Promise<string> | undefined;

  constructor(
    private readonly db: Kysely<BillingDB>,
    private readonly configured: string,
  ) {}

  /** The private key (PEM). */
  privateKey(): Promise<string> {
    this.key ??= this.configured
      ? Promise.resolve(this.configured)
      : reachHostKey(this.db, () =>
          generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
            .privateKey.export({ type: 'sec1', format: 'pem' })
            .toString(),
        );
    // A failed read is tried again by the next caller.
    this.key.catch(() => {
      this.key = undefined;
    });
    return this.key;
  }

  /** The public key as a known_hosts line's key (`ecdsa-sha2-nistp256 AAAA...`) and its SHA256 fingerprint. */
  async publicKey(): Promise<{ publicKey: string; fingerprint: string }> {
    const parsed = parseOne(await this.privateKey());
    if (!parsed) throw new Error('the SSH host key cannot be read');
    const blob = parsed.getPublicSSH();
    return {
      publicKey: `${parsed.type} ${blob.toString('base64')}`,
      fingerprint: `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`,
    };
  }
}

/** One key of a PEM or OpenSSH text (null when it is none). */
function parseOne(text: string): ParsedKey | null {
  const parsed = ssh2.utils.parseKey(text);
  if (parsed instanceof Error) return null;
  return Array.isArray(parsed) ? (parsed[0] ?? null) : parsed;
}

export interface RenterSshDeps {
  relay: ReachRelay;
  hostKey: string;
  /** The user's registered public keys (OpenSSH lines). */
  keys: Promise<string[]>;
  logger: Logger;
  /**
   * Counts one more channel among the session's streams (its bound on streams holds for SSH's channels too): how to
   * count it out, or null past the bound.
   */
  admit: (end: () => void) => (() => void) | null;
  /** The session's bytes a second. */
  meter: ByteMeter;
}

/**
 * Serves one renter's SSH connection on the WebSocket, into the session's workload over the machine's connection.
 * `end(reason)` ends it (the session ended).
 */
export function serveRenterSsh(
  socket: WebSocket,
  target: { sessionId: string; link: Link },
  deps: RenterSshDeps,
): { end(reason: string): void } {
  meterSocket(socket, deps.meter);
  const stream = createWebSocketStream(socket) as Duplex;
  stream.on('error', () => {});
  const transport = coalesceWrites(stream);
  const outbound = outboundHold(
    () => transport.writableLength + stream.writableLength + socket.bufferedAmount,
    () => ended,
  );
  let connection: Connection | undefined;
  const server = new ssh2.Server({ hostKeys: [deps.hostKey], ident: 'gpu-platform' }, (client) => {
    connection = client;
    client.on('error', () => {});
    authenticate(client, deps.keys);
    client.on('session', (accept, reject) => {
      // Its program's channel, once it has one (a session without a program holds nothing to close).
      const program: { channel?: ServerChannel } = {};
      const release = deps.admit(() => program.channel?.close());
      if (!release) return reject();
      serveSession(accept(), target, deps.relay, once(release), program, outbound);
    });
    client.on('tcpip', (accept, reject, info) => {
      const port = info.destPort;
      if (!LOOPBACK.has(info.destIP) || !Number.isInteger(port) || port < 1 || port > 65535) return reject();
      let own: ServerChannel | undefined;
      const release = deps.admit(() => own?.close());
      if (!release) return reject();
      deps.relay.forward(target.link, { sessionId: target.sessionId, port }).then(
        (upstream) => {
          // The renter's connection gone meanwhile: nothing to join it to.
          if (!connection || ended) {
            upstream.close();
            return release();
          }
          own = accept();
          joinChannels(own, upstream, outbound);
          own.once('close', release);
        },
        () => {
          release();
          reject();
        },
      );
    });
  });
  server.on('error', (err: Error) => deps.logger.debug({ err }, 'reach: a renter SSH connection failed'));
  server.injectSocket(transport as never);
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    connection?.end();
    socket.close(1000);
  };
  socket.once('close', () => {
    ended = true;
    stream.destroy();
    connection?.end();
  });
  // Its machine's connection gone (a daemon restart): every channel on it is, and no new one could open.
  void target.link.closed.then(end);
  return { end };
}

/** The most a renter's SSH connection may have unsent before the machine's side of its channels waits. */
const UNSENT_HIGH_WATER = 4 * 1024 * 1024;

/** The machine's side of a renter's channels, held back while the renter's connection is full. */
interface OutboundHold {
  /** Holds `channel` (its output and its standard error) back with the others, from now until it closes. */
  track(channel: ClientChannel): void;
}

/**
 * Holds the machine's side of a renter's channels while their connection has more than `UNSENT_HIGH_WATER` unsent
 * (`unsent()`), until half that (or the connection's end: `over()`). ssh2 writes whatever a channel's window allows
 * into the connection, taken or not, and the window is the renter's client's to grant (up to 4 GiB, without reading
 * a byte): by the window alone, a program's output could fill billing's memory. A channel paused grants the machine
 * no more window, so the machine stops sending.
 */
function outboundHold(unsent: () => number, over: () => boolean): OutboundHold {
  const outputs = new Set<ReturnType<typeof programOutput>>();
  let held = false;
  const all = {
    pause: () => {
      for (const output of outputs) output.pause();
    },
    resume: () => {
      held = false;
      for (const output of outputs) output.resume();
    },
  };
  const check = () => {
    if (held || unsent() <= UNSENT_HIGH_WATER) return;
    held = true;
    hold(all, 0, () => over() || unsent() <= UNSENT_HIGH_WATER / 2);
  };
  return {
    track(channel) {
      const output = programOutput(channel);
      outputs.add(output);
      channel.on('data', check);
      channel.stderr.on('data', check);
      if (held) output.pause();
      channel.once('close', () => outputs.delete(output));
    },
  };
}

/** `f` once, however often it is called. */
function once(f: () => void): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    f();
  };
}

/**
 * Holds the connection to the session's bytes a second: what the renter sends pauses the socket's reading, and what
 * is sent to them leaves only once the meter has room for it. A frame that would overdraw the meter waits before it
 * is sent, not after: frames here are whole turns of SSH packets (up to a MiB joined), and a frame let through first
 * and paid for later would give the renter a second's worth and a frame more. Frames leave in the order they were
 * sent (the stream over the socket waits for each send to complete before the next).
 */
function meterSocket(socket: WebSocket, meter: ByteMeter): void {
  socket.on('message', (data: Buffer) => {
    const wait = meter.take(data.length);
    if (wait === 0) return;
    socket.pause();
    setTimeout(() => socket.resume(), wait);
  });
  type Done = (err?: Error) => void;
  const send = socket.send.bind(socket) as (data: Buffer, options: object, done?: Done) => void;
  /** Frames waiting for the meter, each with the time it may leave, in the order they were sent. */
  const waiting: { at: number; go: () => void }[] = [];
  const next = () => {
    const frame = waiting[0];
    if (!frame) return;
    const wait = frame.at - Date.now();
    if (wait > 0) return void setTimeout(next, wait);
    waiting.shift();
    frame.go();
    next();
  };
  // Called as send(data, done) too (ws's stream over the socket does): the callback is then the second argument.
  socket.send = ((data: Buffer, options?: object | Done, done?: Done) => {
    const [sendOptions, callback] = typeof options === 'function' ? [{}, options as Done] : [options ?? {}, done];
    const wait = meter.take(data.length);
    const go = () => send(data, sendOptions, callback);
    if (wait === 0 && waiting.length === 0) return go();
    waiting.push({ at: Date.now() + wait, go });
    if (waiting.length === 1) setTimeout(next, wait);
  }) as typeof socket.send;
}

/** Public keys only, and only the user's own. */
function authenticate(client: Connection, keysP: Promise<string[]>): void {
  let keys: Promise<ParsedKey[]> | undefined;
  client.on('authentication', (ctx) => {
    if (ctx.method !== 'publickey') return ctx.reject(['publickey']);
    keys ??= keysP.then((lines) => lines.map(parseOne).filter((k): k is ParsedKey => k !== null));
    keys.then(
      (known) => {
        const key = known.find((k) => k.getPublicSSH().equals(ctx.key.data));
        if (!key) return ctx.reject(['publickey']);
        // Without a signature the client only asks whether the key would do.
        if (!ctx.signature) return ctx.accept();
        if (key.verify(ctx.blob as Buffer, ctx.signature, ctx.hashAlgo) !== true) return ctx.reject(['publickey']);
        ctx.accept();
      },
      () => ctx.reject(['publickey']),
    );
  });
}

/** A session channel: one program (a shell, a command or sftp) in the workload, with its terminal and variables. */
function serveSession(
  session: Session,
  target: { sessionId: string; link: Link },
  relay: ReachRelay,
  release: () => void,
  program: { channel?: ServerChannel },
  outbound: OutboundHold,
): void {
  let tty: { cols: number; rows: number; term: string } | null = null;
  const env: Record<string, string> = {};
  let upstream: ClientChannel | undefined;
  let started = false;
  session.on('close', () => {
    if (!started) release();
  });
  session.on('pty', (accept, _reject, info) => {
    tty = { cols: clampSize(info.cols, 80), rows: clampSize(info.rows, 24), term: info.term || 'xterm-256color' };
    accept?.();
  });
  session.on('env', (accept, reject, info) => {
    const known = Object.keys(env).length;
    if (!ENV_NAME.test(info.key) || info.val.length > 256 || (known >= MAX_ENV && !(info.key in env))) {
      return reject?.();
    }
    env[info.key] = info.val;
    accept?.();
  });
  session.on('window-change', (accept, _reject, info) => {
    upstream?.setWindow(clampSize(info.rows, 24), clampSize(info.cols, 80), info.height, info.width);
    accept?.();
  });
  session.on('signal', (accept, _reject, info) => {
    try {
      upstream?.signal(info.name);
    } catch {
      // A signal SSH does not know: nothing sent.
    }
    accept?.();
  });
  // Accepted at once: OpenSSH sends its first bytes (sftp's greeting, the input) without waiting for the answer, and
  // a session without its channel yet would drop them. They wait in the channel until the program is there.
  const start = (accept: () => ServerChannel, reject: (() => void) | undefined, argv: string[]) => {
    if (started) return reject?.();
    started = true;
    const own = accept();
    program.channel = own;
    own.pause();
    let closed = false;
    own.once('close', () => {
      closed = true;
      release();
    });
    relay
      .exec(target.link, {
        sessionId: target.sessionId,
        argv,
        tty: tty && { cols: tty.cols, rows: tty.rows },
        term: tty?.term,
        env,
      })
      .then(
        (channel) => {
          // The renter's channel gone meanwhile: the program goes too.
          if (closed) {
            channel.close();
            return;
          }
          upstream = channel;
          joinChannels(own, channel, outbound);
        },
        () => {
          own.stderr.write("gpu: the machine's connection did not take the program: try again\n");
          own.exit(255);
          own.end();
        },
      );
  };
  session.on('shell', (accept, reject) => start(accept, reject, LOGIN_SHELL));
  session.on('exec', (accept, reject, info) => start(accept, reject, ['/bin/sh', '-c', info.command]));
  session.on('subsystem', (accept, reject, info) => {
    if (info.name !== 'sftp') return reject();
    start(accept, reject, SFTP_SERVER);
  });
}

/**
 * Joins the renter's channel to the machine's: bytes both ways with flow control, the end of input, standard error,
 * and how the program ended, then the close.
 */
function joinChannels(own: ServerChannel, upstream: ClientChannel, outbound: OutboundHold): void {
  own.on('error', () => {});
  upstream.on('error', () => {});
  own.pipe(upstream);
  upstream.pipe(own, { end: false });
  upstream.stderr.pipe(own.stderr, { end: false });
  outbound.track(upstream);
  let exit: [number] | [string, boolean, string] | undefined;
  upstream.on('exit', (code: number | null, signal?: string, core?: boolean, message?: string) => {
    exit = signal ? [signal, core ?? false, message ?? ''] : [code ?? 0];
  });
  upstream.once('close', () => {
    try {
      if (exit) (own.exit as (...args: unknown[]) => void)(...exit);
      own.end();
    } catch {
      // The renter's channel is gone already.
    }
  });
  own.once('close', () => upstream.close());
}
