/**
 * A renter's exec stream on the WebSocket: Kubernetes' channel protocol (`v5.channel.k8s.io`, what `kubectl exec`
 * speaks), each binary message one channel's bytes after a first byte naming the channel: 0 standard input, 1
 * standard output, 2 standard error, 3 the end's status (JSON, a Kubernetes `Status`: `Success`, or `Failure` with
 * reason `NonZeroExitCode` and the code), 4 a terminal's size (`{"Width": cols, "Height": rows}`), and 255 closing a
 * channel (`[255, 0]`: the end of standard input). The relay carries it onto the SSH channel of the program (its
 * data, its stderr, its window, its exit), waiting on whichever side is slower.
 */
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { relayBytes } from '@gpu/common/byte-relay';
import { destroyOnceWritten, type Pacing, writePaced } from '@gpu/common/raw-upgrade';
import type { ClientChannel } from 'ssh2';
import type { WebSocket } from 'ws';
import type { ByteMeter } from './meter.ts';

export const CHANNEL_PROTOCOL = 'v5.channel.k8s.io';
/** The protocols a client may offer, newest first (v4 has no close channel; its input ends with the socket). */
export const CHANNEL_PROTOCOLS = [CHANNEL_PROTOCOL, 'v4.channel.k8s.io'] as const;

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const STATUS = 3;
const RESIZE = 4;
const CLOSE = 255;

/** How long a joined side is given to take what was on its way once the other side closed. */
const CLOSE_GRACE_MS = 30_000;

/** The most a WebSocket may have unsent before the program's output waits. */
const HIGH_WATER = 1024 * 1024;

/** What a source of bytes must do to be held back: a WebSocket, a stream, an SSH channel. */
interface Pausable {
  pause(): unknown;
  resume(): unknown;
}

/** Pauses `source` for `ms`, then until `ready()`, then lets it go on. */
export function hold(source: Pausable, ms: number, ready: () => boolean): void {
  source.pause();
  const check = () => {
    if (ready()) source.resume();
    else setTimeout(check, 5);
  };
  setTimeout(check, ms);
}

/**
 * Sends a message, pausing `source` while the WebSocket has more than `HIGH_WATER` unsent, and for as long as the
 * session's meter asks.
 */
function sendPaced(
  socket: WebSocket,
  data: Buffer,
  source: Pausable & { isPaused(): boolean },
  meter: ByteMeter,
): void {
  socket.send(data);
  const wait = meter.take(data.length);
  if ((wait === 0 && socket.bufferedAmount <= HIGH_WATER) || source.isPaused()) return;
  hold(source, wait, () => socket.bufferedAmount <= HIGH_WATER / 2 || socket.readyState !== socket.OPEN);
}

/**
 * A program's output on the machine: its standard output and its standard error, two streams of one SSH channel,
 * held back together (each paused leaves the window it fills ungranted, so the machine stops sending). Holding back
 * one alone lets the other flow as fast as the machine writes, into memory.
 */
export function programOutput(channel: ClientChannel): Pausable & { isPaused(): boolean } {
  return {
    pause: () => {
      channel.pause();
      channel.stderr.pause();
    },
    resume: () => {
      channel.resume();
      channel.stderr.resume();
    },
    isPaused: () => channel.isPaused() && channel.stderr.isPaused(),
  };
}

/** The session's meter as a writer's pace. */
const paced = (meter: ByteMeter): Pacing => ({ highWater: HIGH_WATER, pace: (n) => meter.take(n) });

/**
 * A forwarded TCP connection on the renter's WebSocket (`port-forward`), joined to the machine's side of it: the
 * daemon's raw dial-back (relay.ts `dial`), or an SSH channel of a daemon from before dial-backs. Each binary message
 * is bytes of the connection, both ways, at the session's meter's pace. The workload's side ending ends the
 * WebSocket with 1000 (a WebSocket has no half-close); the renter's closing ends the workload's input, then the
 * connection; `end(reason)` ends it from outside (the session ended) with 1001.
 */
export function pipeBytes(socket: WebSocket, machine: Duplex, meter: ByteMeter): { end(reason: string): void } {
  const pacing = paced(meter);
  machine.on('error', () => socket.terminate());
  socket.on('error', () => machine.destroy());
  machine.on('data', (d: Buffer) => sendPaced(socket, d, machine, meter));
  const over = () => {
    if (socket.readyState === socket.OPEN) socket.close(1000);
  };
  machine.once('end', over);
  machine.once('close', over);
  socket.on('message', (raw: Buffer, isBinary: boolean) => {
    const data = isBinary ? raw : Buffer.from(raw);
    if (data.length > 0 && !machine.destroyed) writePaced(machine, data, socket, pacing);
  });
  socket.once('close', () => {
    machine.end();
    // A workload that never closes its side after the end of its input is closed for it.
    setTimeout(() => machine.destroy(), 5_000).unref();
  });
  machine.resume();
  return {
    end: (reason) => {
      if (socket.readyState === socket.OPEN) socket.close(1001, reason.slice(0, 120));
      machine.destroy();
    },
  };
}

/**
 * A forwarded TCP connection as a raw byte stream (`Upgrade: tcp`) from the renter, joined to the daemon's raw
 * dial-back (or, at an instance that passes it on, to the holder's): bytes both ways as they come, at the session's
 * meter's pace, each side's end (FIN) passed on as the other's, so a request half-closed still gets its answer. A
 * side closed after its end closes the other once what was on its way there is written; a failure of either side
 * ends the other at once; `end(reason)` cuts both (the session ended). A side left half-open by a peer that went away
 * is found by TCP's keepalive (@gpu/common/raw-upgrade).
 */
export function joinRaw(renter: Duplex, machine: Duplex, meter: ByteMeter): { end(reason: string): void } {
  // Both flow from here on (a dial-back comes paused: what the program said first waits in it), on the sockets that
  // carry them now (@gpu/common/byte-relay takes two TCP sockets over to read them into buffers of its own).
  const [from, to] = relayBytes(renter, machine, paced(meter));
  const join = (side: Duplex, other: Duplex) => {
    side.on('error', () => other.destroy());
    side.once('close', () => {
      // Cut before its end came (a reset): the other side goes too.
      if (!side.readableEnded) return void other.destroy();
      // Closed after its end: what was on its way to the other side is written first (its end passed on by the
      // relay), then that side goes too; a side that does not take it is not waited for long.
      destroyOnceWritten(other, CLOSE_GRACE_MS);
    });
  };
  join(from, to);
  join(to, from);
  return {
    end: () => {
      // A reset, so that a renter connected straight here tells the cut from the workload's end.
      if (from instanceof Socket) from.resetAndDestroy();
      else from.destroy();
      to.destroy();
    },
  };
}

/** A Kubernetes `Status` for how the program ended. */
function endStatus(end: { code: number | null; signal: string | null; message?: string }): string {
  if (end.message !== undefined) {
    return JSON.stringify({ metadata: {}, status: 'Failure', message: end.message, reason: 'InternalError' });
  }
  const code = end.signal ? 128 + (SIGNALS[end.signal] ?? 0) : (end.code ?? 0);
  if (code === 0) return JSON.stringify({ metadata: {}, status: 'Success' });
  return JSON.stringify({
    metadata: {},
    status: 'Failure',
    message: end.signal
      ? `command terminated by signal ${end.signal}`
      : `command terminated with non-zero exit code: ${code}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(code) }] },
  });
}

const SIGNALS: Record<string, number> = { HUP: 1, INT: 2, QUIT: 3, KILL: 9, PIPE: 13, ALRM: 14, TERM: 15, USR1: 10 };

/**
 * Carries the WebSocket's channels onto the program's SSH channel until either ends; `end(reason)` ends it from
 * outside (the session ended) with a failure status. Resolves once both are closed, with the bytes each way.
 */
export function bridge(
  socket: WebSocket,
  channel: ClientChannel,
  opts: { tty: boolean; meter: ByteMeter },
): { end(reason: string): void; done: Promise<{ bytesIn: number; bytesOut: number }> } {
  let bytesIn = 0;
  let bytesOut = 0;
  let finished = false;
  // Both the program's streams wait while the renter's side is full, and for the session's meter.
  const output = programOutput(channel);
  const send = (id: number, data: Buffer) => {
    bytesOut += data.length;
    sendPaced(socket, Buffer.concat([Buffer.of(id), data]), output, opts.meter);
  };
  const finish = (status: string) => {
    if (finished) return;
    finished = true;
    if (socket.readyState === socket.OPEN) {
      socket.send(Buffer.concat([Buffer.of(STATUS), Buffer.from(status)]));
      socket.close(1000);
    }
    channel.close();
  };
  channel.on('data', (d: Buffer) => send(STDOUT, d));
  channel.stderr.on('data', (d: Buffer) => send(opts.tty ? STDOUT : STDERR, d));
  let exit: { code: number | null; signal: string | null } = { code: null, signal: null };
  channel.on('exit', (code: number | null, signal?: string) => {
    exit = signal ? { code: null, signal } : { code, signal: null };
  });
  channel.on('close', () => {
    if (exit.code === null && exit.signal === null)
      finish(endStatus({ code: null, signal: null, message: 'the connection to the machine was lost' }));
    else finish(endStatus(exit));
  });
  socket.on('message', (raw: Buffer, isBinary: boolean) => {
    const data = isBinary ? raw : Buffer.from(raw);
    if (data.length === 0) return;
    const id = data[0];
    const body = data.subarray(1);
    if (id === STDIN) {
      bytesIn += body.length;
      writePaced(channel, body, socket, paced(opts.meter));
    } else if (id === RESIZE) {
      try {
        const size = JSON.parse(String(body)) as { Width?: number; Height?: number };
        const cols = Math.min(1000, Math.max(1, Math.trunc(Number(size.Width) || 80)));
        const rows = Math.min(1000, Math.max(1, Math.trunc(Number(size.Height) || 24)));
        channel.setWindow(rows, cols, 0, 0);
      } catch {
        // A size that is not JSON changes nothing.
      }
    } else if (id === CLOSE && body[0] === STDIN) {
      channel.end();
    }
  });
  socket.on('close', () => {
    if (!finished) {
      finished = true;
      channel.close();
    }
  });
  const done = new Promise<{ bytesIn: number; bytesOut: number }>((resolve) => {
    let left = 2;
    const one = () => {
      left -= 1;
      if (left === 0) resolve({ bytesIn, bytesOut });
    };
    channel.once('close', one);
    if (socket.readyState === socket.CLOSED) one();
    else socket.once('close', one);
  });
  return { end: (reason) => finish(endStatus({ code: null, signal: null, message: reason })), done };
}
