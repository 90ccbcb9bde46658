/**
 * Moving a stream's bytes between two TCP sockets at the least CPU Node allows (a forwarded port's bytes in billing's
 * relay and in the daemon, docs/architecture.md "Reach").
 *
 * A socket read as a stream ('data') gets a newly allocated buffer for every read of at most 64 KiB: the allocation,
 * the garbage it leaves, the stream's events and a write per 64 KiB cost a relay about 1.1 CPU seconds per GB here.
 * Node reads a socket into buffers of the caller's when the socket is made with `onread`: a relay writes each read
 * straight to the other socket and reads the next only once the kernel took it, the buffers coming back to a pool of
 * the process's, at well under half that CPU (docs/benchmarks.md, "Reach"). `net.Server` offers no `onread`, so a socket it accepted (a
 * renter's upgraded request, a daemon's dial-back) is taken over: its handle goes to a new `net.Socket` made with
 * `onread`, as Node's own child_process makes a socket of a handle passed to it. That takes two things Node does not
 * document (a socket's `_handle`, and `handle` among the constructor's options), so it is done only where they are as
 * this module knows them (a TCP or pipe handle that reads into a user buffer), and only for a socket whose state it can
 * carry over whole: connected, its input not ended, nothing of its own still being written. Any other pair is relayed
 * as streams (`pump`), as before, with the same results.
 *
 * The socket taken over stays as a shell for those who hold it: destroying, ending or resetting it does so to the new
 * one, it closes when the new one closes, and `streamBytes` counts its bytes through the new one.
 */
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { type Pacing, pump } from './raw-upgrade.ts';

/**
 * Read buffers: a large one where the last read filled its buffer (a stream moving bytes as fast as they come), a
 * small one otherwise (the first read, an interactive or idle stream). Relaying here, reads of 1 MiB cost about a
 * quarter less CPU per GB than 256 KiB and 64 KiB half as much again. Node asks for the next read's buffer after each
 * read, so a stream holds one buffer each way for its next read, and one more while a write from the last is in
 * flight: an idle stream holds two small ones, a stream at full speed at most four large ones (4 MiB, where a stream
 * read as streams could hold 2 MiB unsent at its 1 MiB high-water mark each way, and read 64 KiB more).
 */
const LARGE = 1024 * 1024;
const SMALL = 16 * 1024;

/** Buffers no read or write holds, kept for the next (up to a bound each: more go to the collector). */
const pools = new Map<number, { free: Buffer[]; keep: number }>([
  [LARGE, { free: [], keep: 16 }],
  [SMALL, { free: [], keep: 256 }],
]);

function takeBuffer(size: number): Buffer {
  return pools.get(size)!.free.pop() ?? Buffer.allocUnsafe(size);
}

function giveBuffer(buffer: Buffer): void {
  const pool = pools.get(buffer.length);
  if (pool && pool.free.length < pool.keep) pool.free.push(buffer);
}

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

/** A socket taken over: the one that carries it now, and what to add to its counts for the shell's. */
interface Adoption {
  socket: Socket;
  readOffset: number;
  writtenOffset: number;
}
const adopted = new WeakMap<Duplex, Adoption>();

/** The bytes read from and written to `socket` since it was made, through whatever socket carries it now. */
export function streamBytes(socket: Socket): { read: number; written: number } {
  const adoption = adopted.get(socket);
  if (!adoption) return { read: socket.bytesRead, written: socket.bytesWritten };
  return {
    read: adoption.readOffset + adoption.socket.bytesRead,
    written: adoption.writtenOffset + adoption.socket.bytesWritten,
  };
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

/**
 * One direction: reads `from` into pooled buffers, writes each read to `to`, and reads again once `to` took it (and
 * the pace allows). Once `to` is gone, what `from` still sends is read and dropped, so that `from` sees its own end.
 */
class Direction {
  from!: Socket;
  to!: Duplex;
  /** What the paused source waits for: its write, and the pace's time. */
  private waits = 0;
  /** The buffer a write in flight holds. */
  private writing: Buffer | null = null;
  private nextSize = SMALL;

  constructor(private readonly pacing: Pacing) {}

  /** `onread`'s buffer: Node asks for the next read's after each read (and once at the start). */
  readonly buffer = (): Buffer => takeBuffer(this.nextSize);

  /** `onread`'s callback: false pauses the source (Node stops reading the handle until it is resumed). */
  readonly read = (n: number, buffer: Uint8Array): boolean => {
    const read = buffer as Buffer;
    this.nextSize = n === read.length ? LARGE : SMALL;
    const to = this.to;
    if (to.destroyed || to.writableEnded) {
      giveBuffer(read);
      return true;
    }
    // A view of the buffer: written at once when the kernel takes it whole (nothing left queued), else held by the
    // write until it completes, the buffer kept from the pool until then and the source paused.
    to.write(read.subarray(0, n), this.written);
    const wait = this.pacing.pace?.(n) ?? 0;
    if (to.writableLength > 0) this.writing = read;
    else giveBuffer(read);
    if (!this.writing && wait === 0) return true;
    this.waits = (this.writing ? 1 : 0) + (wait > 0 ? 1 : 0);
    if (wait > 0) setTimeout(this.done, wait);
    return false;
  };

  /** Every write's callback: the one the source waits for gives its buffer back and lets the source go on. */
  private readonly written = (): void => {
    if (!this.writing) return;
    giveBuffer(this.writing);
    this.writing = null;
    this.done();
  };

  private readonly done = (): void => {
    this.waits -= 1;
    if (this.waits === 0 && !this.from.destroyed) this.from.resume();
  };
}

/**
 * Takes `shell`'s handle into a new socket that reads into `direction`'s buffers. What the shell had read and not
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
  const before = { read: shell.bytesRead, written: shell.bytesWritten };
  internals._handle = null;
  const socket = new Socket({
    handle,
    allowHalfOpen: true,
    readable: true,
    writable: true,
    onread: { buffer: direction.buffer, callback: direction.read },
  } as unknown as ConstructorParameters<typeof Socket>[0]);
  // The counts go on from the shell's, whether Node keeps them on the handle (that the new socket starts from) or on
  // the socket (that starts again from 0).
  adopted.set(shell, {
    socket,
    readOffset: before.read - socket.bytesRead,
    writtenOffset: before.written - socket.bytesWritten,
  });
  // The shell follows the socket: it closes when the socket does (its 'close' listeners learn of the end), and
  // destroying, ending or resetting it (its holders' ways to end the connection) does so to the socket. Writing to
  // it fails (it has no handle): a quiet failure, as its own 'error' listener takes it.
  socket.once('close', () => shell.destroy());
  shell.once('close', () => socket.destroy());
  shell.on('error', () => {});
  shell.end = ((...args: Parameters<Socket['end']>) => {
    socket.end(...args);
    return shell;
  }) as Socket['end'];
  shell.resetAndDestroy = () => {
    socket.resetAndDestroy();
    return shell;
  };
  // Its failures are the new socket's to report ('close' with an error): a holder listening on the shell hears them.
  socket.on('error', (err) => {
    if (shell.listenerCount('error') > 1) shell.emit('error', err);
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
