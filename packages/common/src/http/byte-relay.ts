/**
 * Moving a stream's bytes between two TCP sockets at the least CPU Node allows (a forwarded port's bytes in billing's
 * relay and in the daemon, docs/architecture.md "Reach").
 *
 * A socket read as a stream ('data') gets a newly allocated buffer for every read of at most 64 KiB: the allocation,
 * the garbage it leaves, the stream's events and a write per 64 KiB cost a relay about 1.1 CPU seconds per GB here.
 * Node reads a socket into one buffer of the caller's, reused for every read, when the socket is made with `onread`;
 * a relay writes what was read from it straight to the other socket and reads the next only once the kernel took it,
 * at about half that CPU (docs/benchmarks.md, "Reach"). `net.Server` offers no `onread`, so a socket it accepted (a
 * renter's upgraded request, a daemon's dial-back) is taken over: its handle goes to a new `net.Socket` made with
 * `onread`, as Node's own child_process makes a socket of a handle passed to it. That takes two things Node does not
 * document (a socket's `_handle`, and `handle` among the constructor's options), so it is done only where they are as
 * this module knows them (a TCP or pipe handle that reads into a user buffer), and only for a socket whose state it can
 * carry over whole: connected, its input not ended, nothing of its own still being written. Any other pair is relayed
 * as streams (`pump`), as before, with the same results.
 *
 * The socket taken over stays as a shell for those who hold it: destroying it destroys the new one, it closes when
 * the new one closes, and `streamBytes` counts its bytes through the new one.
 */
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { type Pacing, pump } from './raw-upgrade.ts';

/**
 * Each direction's read buffer: a read takes at most this much of what the kernel holds. Relaying here, 1 MiB cost
 * about a quarter less CPU per GB than 256 KiB and 64 KiB half as much again. A stream holds its two buffers for its
 * life, but only the pages a read has touched take memory (an idle stream's few): at most 2 MiB a stream, what a
 * stream read as streams could hold unsent at its 1 MiB high-water mark each way.
 */
const READ_BUFFER_BYTES = 1024 * 1024;

/** What this module reaches inside a socket (Node's own names; absent on a Node that changed them). */
interface Handle {
  readStart(): number;
  readStop(): number;
  useUserBuffer(buffer: Uint8Array): void;
}
interface SocketInternals {
  _handle: Handle | null;
  _readableState?: { ended?: boolean };
}

/** A socket taken over: the one that carries it now, and what the shell had written before. */
interface Adoption {
  socket: Socket;
  writtenBefore: number;
}
const adopted = new WeakMap<Duplex, Adoption>();

/** The bytes read from and written to `socket` since it was made, through whatever socket carries it now. */
export function streamBytes(socket: Socket): { read: number; written: number } {
  const adoption = adopted.get(socket);
  if (!adoption) return { read: socket.bytesRead, written: socket.bytesWritten };
  // The handle counts what was read over its life, the socket what it wrote.
  return { read: adoption.socket.bytesRead, written: adoption.writtenBefore + adoption.socket.bytesWritten };
}

/** Whether `socket`'s handle can be taken over whole (see the module's comment). */
function adoptable(socket: Duplex): socket is Socket {
  if (!(socket instanceof Socket) || socket instanceof TLSSocket) return false;
  const internals = socket as unknown as SocketInternals;
  const handle = internals._handle;
  const name = handle?.constructor?.name;
  return (
    !!handle &&
    (name === 'TCP' || name === 'Pipe') &&
    typeof handle.useUserBuffer === 'function' &&
    typeof handle.readStart === 'function' &&
    !socket.connecting &&
    !socket.destroyed &&
    // Its end read already: a handle past its end reads no more, and the new socket would wait for one.
    internals._readableState?.ended === false &&
    // A write of its own still on the handle would complete into the new socket's accounts.
    socket.writableLength === 0 &&
    !socket.writableEnded
  );
}

/** One direction: reads `from` into its buffer, writes each read to `to`, reads again once `to` took it. */
class Direction {
  readonly buffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
  from!: Socket;
  to!: Duplex;
  /** What the paused source waits for: its write, and the pace's time. */
  private waits = 0;
  private writing = false;

  constructor(private readonly pacing: Pacing) {}

  /** `onread`'s callback: false pauses the source (Node stops reading the handle until it is resumed). */
  readonly read = (n: number, buffer: Uint8Array): boolean => {
    const to = this.to;
    if (to.destroyed) return false;
    // A view of the buffer: written at once when the kernel takes it whole (nothing left queued), else held by the
    // write until it completes, and the buffer is not read into again before then.
    to.write((buffer as Buffer).subarray(0, n), this.written);
    const wait = this.pacing.pace?.(n) ?? 0;
    this.writing = to.writableLength > 0;
    if (!this.writing && wait === 0) return true;
    this.waits = (this.writing ? 1 : 0) + (wait > 0 ? 1 : 0);
    if (wait > 0) setTimeout(this.done, wait);
    return false;
  };

  /** Every write's callback: the one the source waits for lets it go on. */
  private readonly written = (): void => {
    if (!this.writing) return;
    this.writing = false;
    this.done();
  };

  private readonly done = (): void => {
    this.waits -= 1;
    if (this.waits === 0 && !this.from.destroyed) this.from.resume();
  };
}

/**
 * Takes `shell`'s handle into a new socket that reads into `direction`'s buffer. What the shell had read and not
 * passed on (an upgrade's first bytes) is returned, to be written on before anything the new socket reads.
 */
function adopt(shell: Socket, direction: Direction): { socket: Socket; unread: Buffer[] } {
  shell.pause();
  const unread: Buffer[] = [];
  for (let chunk = shell.read() as Buffer | null; chunk !== null; chunk = shell.read() as Buffer | null) {
    unread.push(chunk);
  }
  const internals = shell as unknown as SocketInternals;
  const handle = internals._handle;
  const writtenBefore = shell.bytesWritten;
  internals._handle = null;
  const socket = new Socket({
    handle,
    allowHalfOpen: true,
    readable: true,
    writable: true,
    onread: { buffer: direction.buffer, callback: direction.read },
  } as unknown as ConstructorParameters<typeof Socket>[0]);
  adopted.set(shell, { socket, writtenBefore });
  // The shell follows the socket: it closes when the socket does (its 'close' listeners learn of the end), and
  // destroying it (its holders' way to cut the connection) destroys the socket.
  socket.once('close', () => shell.destroy());
  shell.once('close', () => socket.destroy());
  // Its failures are the new socket's to report ('close' with an error): a holder listening on the shell hears them.
  socket.on('error', (err) => {
    if (shell.listenerCount('error') > 0) shell.emit('error', err);
  });
  return { socket, unread };
}

/**
 * Passes `a`'s bytes to `b` and `b`'s to `a` as they come, each side's end (FIN) as the other's, at `pacing`'s pace
 * (its high-water mark applies to streams; a taken-over socket holds at most one read unsent). Returns the two sides
 * to listen on and close from now on: new sockets where both were taken over (module comment), else `a` and `b`
 * themselves. Both flow from now on; closing and failures are the caller's to join.
 */
export function relayBytes(a: Duplex, b: Duplex, pacing: Pacing = {}): [Duplex, Duplex] {
  if (!(adoptable(a) && adoptable(b))) {
    pump(a, b, pacing);
    pump(b, a, pacing);
    a.resume();
    b.resume();
    return [a, b];
  }
  const ab = new Direction(pacing);
  const ba = new Direction(pacing);
  const first = adopt(a, ab);
  const second = adopt(b, ba);
  ab.from = first.socket;
  ab.to = second.socket;
  ba.from = second.socket;
  ba.to = first.socket;
  for (const chunk of first.unread) second.socket.write(chunk);
  for (const chunk of second.unread) first.socket.write(chunk);
  first.socket.once('end', () => second.socket.end());
  second.socket.once('end', () => first.socket.end());
  return [first.socket, second.socket];
}
