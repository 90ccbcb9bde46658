/**
 * Forwarded ports: the relay's SSH `direct-tcpip` channels (link.ts), whose destination names a session (its ID as
 * the host) and a port. Each is one TCP connection to `127.0.0.1:<port>` on the workload's own loopback, inside its
 * network namespace: never the machine's loopback or network, and nothing of the workload's but that loopback.
 *
 * A process cannot connect from another network namespace than its own, and Node cannot change its own, so each
 * workload reached this way gets a small forwarder at its first forward: the daemon's own node, started by
 * `nsenter --net` in the network namespace of the workload's first process (only that namespace: it runs the
 * machine's files; joined through a descriptor opened while the PID was the workload's, entry.ts `NAMESPACES_OF`)
 * with no group of root's and no new privileges (`setpriv`), which makes itself the workload's user (no capability
 * left) before anything else. A daemon that is not root (its sandboxes run as its own user) joins the sandbox's
 * owning user namespace first, as entering does, keeping its credentials. For each
 * connection it connects inside and hands the connected socket back to the daemon over its IPC channel (a socket
 * pair only the daemon holds; the descriptor passes, the bytes do not): the daemon then holds an ordinary socket of
 * the workload's namespace, and the renter's bytes go between it and the program with no process between. The
 * forwarder reads none of them (a program that speaks first keeps its first words for the renter), listens on
 * nothing and leaves no file behind. A port nothing listens on is refused before the relay's channel is accepted, so
 * the relay can tell the renter so.
 *
 * A forwarder holds its workload's namespace: it is killed when the workload ends (its entry's `ended`), when the
 * session's entry is no longer the one it serves, and at the link's stop, and it exits by itself when the daemon is
 * gone (its IPC channel closes). The connections into a workload are closed when it ends.
 *
 * A container's ports are forwarded by a daemon running as root only (its namespaces are its runtime's): a daemon that
 * is not root refuses those forwards.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { relayBytes } from '@gpu/common/byte-relay';
import { destroyOnceWritten } from '@gpu/common/raw-upgrade';
import { type Entry, HELPERS_PATH, inWorkloadNetwork } from '../workloads/entry.ts';
import type { ProcessRef } from '../workloads/processes.ts';

/** Why a forward was refused: a malformed destination, no workload of the session here, nothing listening, or else. */
type ForwardFailure = 'invalid' | 'no_workload' | 'refused' | 'unavailable';

export class ForwardError extends Error {
  constructor(
    readonly reason: ForwardFailure,
    message: string,
  ) {
    super(message);
  }
}

/** How long the forwarder may take to start and connect (127.0.0.1 answers at once; a full backlog may not). */
const CONNECT_TIMEOUT_MS = 10_000;

const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The forwarder (CommonJS, run by `node -e`; its arguments: its name, the session, the workload's user ID, empty for
 * the daemon's own). It takes the workload's user first of all: it starts as root, for the daemon's node may be where
 * only root can read it (an installation under /root). It connects a paused socket: a paused one reads nothing before
 * it is handed over, so no byte of the program's stays behind in this process.
 */
const FORWARDER = `
const fs = require('node:fs');
// The namespaces it was started through (NAMESPACES_OF): none of its business once in.
for (const fd of [4, 5]) {
  try {
    if (/^(user|net):\\[/.test(fs.readlinkSync('/proc/self/fd/' + fd))) fs.closeSync(fd);
  } catch {}
}
if (process.argv[3] !== '') {
  const uid = Number(process.argv[3]);
  process.setgid(uid);
  process.setuid(uid);
}
const net = require('node:net');
process.on('disconnect', () => process.exit(0));
process.on('message', ({ id, port }) => {
  const socket = new net.Socket();
  socket.pause();
  socket.once('error', (err) => process.send({ id, error: err.code || 'EIO' }));
  socket.connect(port, '127.0.0.1', () => {
    socket.removeAllListeners('error');
    socket.on('error', () => {});
    process.send({ id }, socket);
  });
});
`;

/** The forwarder's answer to one connection: the socket comes beside it, or the error's code. */
interface Reply {
  id: number;
  error?: string;
}

/** What a connection came to: the socket, or the error's code (GONE: the forwarder ended first). */
type Outcome = Socket | string;
const GONE = 'GONE';

/** One workload's forwarder, and the connections it opened. */
class Forwarder {
  private readonly child: ChildProcess;
  private readonly waiting = new Map<number, (outcome: Outcome) => void>();
  private readonly sockets = new Set<Socket>();
  private next = 0;
  private stderr = '';
  private killed = false;
  /** Whether its process ended (a later forward starts another). */
  exited = false;

  /** `uid`: the workload's user (a root daemon's), or undefined for the daemon's own; `first`: its first process. */
  constructor(
    readonly entry: Entry,
    sessionId: string,
    first: ProcessRef,
    uid: number | undefined,
  ) {
    const forwarder = [
      'setpriv',
      // A root daemon's forwarder makes itself the workload's user. Another's is its own user, which the sandbox's
      // owning user namespace maps to its root (bubblewrap sets up as that root): it keeps no capability there.
      ...(uid === undefined ? ['--bounding-set=-all'] : ['--clear-groups']),
      '--no-new-privs',
      '--inh-caps=-all',
      '--',
      process.execPath,
      '-e',
      FORWARDER,
      // Its name in `ps`.
      'gpu-port-forwarder',
      sessionId,
      uid === undefined ? '' : String(uid),
    ];
    // Its network namespace by the descriptor `NAMESPACES_OF` opened while the PID was the workload's, never by the
    // PID (the kernel may have given it to another process by then).
    const [command, ...args] = [...inWorkloadNetwork(first), ...forwarder];
    this.child = spawn(command!, args, {
      env: { PATH: HELPERS_PATH },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      cwd: '/',
    });
    this.child.stderr?.on('data', (d: Buffer) => {
      this.stderr = `${this.stderr}${d}`.slice(-500);
    });
    this.child.on('message', (reply: Reply, socket: Socket | undefined) => {
      const answer = this.waiting.get(reply.id);
      if (answer) answer(socket ?? reply.error ?? 'EIO');
      else socket?.destroy();
    });
    // Once its errors are all read (they say why it did not start).
    this.child.once('close', () => this.gone());
    // It could not be started at all (no process left, a helper missing): no forward through it, never a crash.
    this.child.on('error', (err) => {
      this.stderr = `${this.stderr}${err.message}`.slice(-500);
      this.gone();
    });
  }

  /** A connection to `port` inside the workload; rejects with a ForwardError. */
  connect(port: number): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const id = ++this.next;
      const settle = (outcome: Outcome) => {
        clearTimeout(timer);
        this.waiting.delete(id);
        if (typeof outcome === 'string') {
          reject(this.refusal(port, outcome));
        } else if (this.killed) {
          // Its workload ended meanwhile.
          outcome.destroy();
          reject(this.refusal(port, GONE));
        } else {
          resolve(this.adopt(outcome));
        }
      };
      const timer = setTimeout(() => settle('ETIMEDOUT'), CONNECT_TIMEOUT_MS);
      this.waiting.set(id, settle);
      this.child.send({ id, port }, (err) => {
        if (err) settle(GONE);
      });
    });
  }

  /** Ends the forwarder and every connection it opened. */
  kill(): void {
    this.killed = true;
    this.child.kill('SIGKILL');
    for (const s of this.sockets) s.destroy();
  }

  /** A socket handed over, kept until it closes or the workload ends. */
  private adopt(socket: Socket): Socket {
    // Half-open: one side's end (FIN) is passed on while the other may still send. A received socket is made
    // without; the flag is read at its end, so setting it before anything is read is enough.
    socket.allowHalfOpen = true;
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    return socket;
  }

  private refusal(port: number, code: string): ForwardError {
    if (code === 'ECONNREFUSED') return new ForwardError('refused', `nothing listens on port ${port} in the workload`);
    if (code !== GONE) return new ForwardError('unavailable', `port ${port} in the workload: ${code}`);
    const why = this.stderr.trim().split('\n').at(-1);
    return new ForwardError('unavailable', `the workload's forwarder is not running${why ? ` (${why})` : ''}`);
  }

  private gone(): void {
    this.exited = true;
    for (const answer of [...this.waiting.values()]) answer(GONE);
  }
}

/** The workloads' forwarded ports (link.ts's `direct-tcpip` channels). */
export class WorkloadPorts {
  private readonly forwarders = new Map<string, Forwarder>();
  private stopped = false;

  /** `entryOf`: how to enter the session's workload; null when none runs here. */
  constructor(private readonly entryOf: (sessionId: string) => Entry | null) {}

  /**
   * A TCP connection to `127.0.0.1:<port>` inside the session's workload, half-open. Rejects with a ForwardError:
   * `refused` when nothing listens there, `no_workload`, `invalid` (not a session ID, or a port outside 1-65535) or
   * `unavailable` (a container's port and a daemon not running as root, a forwarder that could not start).
   */
  async connect(sessionId: string, port: number): Promise<Socket> {
    if (!SESSION_ID.test(sessionId) || !Number.isInteger(port) || port < 1 || port > 65_535) {
      throw new ForwardError('invalid', 'a forward names a session ID and a port from 1 to 65535');
    }
    const entry = this.stopped ? null : this.entryOf(sessionId);
    if (!entry) throw new ForwardError('no_workload', 'no workload of this session runs on the machine');
    return this.forwarderOf(sessionId, entry).connect(port);
  }

  /** Ends every forwarder and every connection they opened; connects no more. */
  stop(): void {
    this.stopped = true;
    for (const forwarder of this.forwarders.values()) forwarder.kill();
    this.forwarders.clear();
  }

  /** The workload's forwarder, started at its first forward (again if it exited). */
  private forwarderOf(sessionId: string, entry: Entry): Forwarder {
    const current = this.forwarders.get(sessionId);
    if (current?.entry === entry && !current.exited) return current;
    // An earlier workload's: it must not hold that one's namespace. (One that exited keeps its connections until
    // its workload ends.)
    if (current && current.entry !== entry) current.kill();
    const root = process.getuid?.() === 0;
    if (!root && entry.kind === 'container') {
      throw new ForwardError('unavailable', "forwarding a container's port needs the daemon to run as root");
    }
    if (root !== (entry.uid !== undefined)) {
      throw new ForwardError('unavailable', 'the workload runs as another user than this daemon would reach it as');
    }
    const first = entry.process();
    if (first === null) throw new ForwardError('no_workload', 'the workload is not set up yet, or has ended');
    const forwarder = new Forwarder(entry, sessionId, first, entry.uid);
    this.forwarders.set(sessionId, forwarder);
    const retire = () => {
      forwarder.kill();
      if (this.forwarders.get(sessionId) === forwarder) this.forwarders.delete(sessionId);
    };
    entry.ended.then(retire, retire);
    return forwarder;
  }
}

/**
 * Joins the relay's side (an SSH channel of ssh2's, or the raw connection of a dial-back) and a workload's connection
 * both ways. The renter's EOF is the program's end of input (FIN) while the program still answers; the program's end
 * ends the relay's side once what it sent is out (ssh2's server channel sends EOF and closes at its end; a dial-back
 * sends its FIN): the relay learns the connection is over. One side's failure or close ends the other.
 */
export function splice(relaySide: Duplex, workloadSide: Socket): void {
  // On the sockets that carry them from now on (@gpu/common/byte-relay takes a dial-back and the workload's socket
  // over to read them into buffers of its own; an SSH channel is relayed as a stream).
  const [channel, socket] = relayBytes(relaySide, workloadSide);
  channel.on('error', () => socket.destroy());
  // A failed socket closes ('close' below, failed).
  socket.on('error', () => {});
  // Closed without its end (reset, or the workload ended): at once when it failed, else after what was sent.
  socket.once('close', (failed: boolean) => {
    if (failed) channel.destroy();
    else if (!channel.writableEnded) channel.end();
  });
  // The relay's side gone: the program's connection too, once what was on its way to the program is written (a
  // program that reads no more is not waited for long).
  channel.once('close', () => destroyOnceWritten(socket, 5_000));
}

/** The relay's request for a forwarded port's connection dialled back on a connection of its own (link.ts). */
export const DIAL_SUBSYSTEM = 'gpu-dial';
