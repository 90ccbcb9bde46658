/**
 * A renter's exec stream on the WebSocket: Kubernetes' channel protocol (`v5.channel.k8s.io`, what `kubectl exec`
 * speaks), each binary message one channel's bytes after a first byte naming the channel: 0 standard input, 1
 * standard output, 2 standard error, 3 the end's status (JSON, a Kubernetes `Status`: `Success`, or `Failure` with
 * reason `NonZeroExitCode` and the code), 4 a terminal's size (`{"Width": cols, "Height": rows}`), and 255 closing a
 * channel (`[255, 0]`: the end of standard input). The relay carries it onto the SSH channel of the program (its
 * data, its stderr, its window, its exit), waiting on whichever side is slower.
 */
import type { ClientChannel } from 'ssh2';
import type { WebSocket } from 'ws';
import type { ByteMeter } from './meter.ts';
import type { Dialled } from './relay.ts';

export const CHANNEL_PROTOCOL = 'v5.channel.k8s.io';
/** The protocols a client may offer, newest first (v4 has no close channel; its input ends with the socket). */
export const CHANNEL_PROTOCOLS = [CHANNEL_PROTOCOL, 'v4.channel.k8s.io'] as const;

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const STATUS = 3;
const RESIZE = 4;
const CLOSE = 255;

/** The most a WebSocket may have unsent before the program's output waits. */
const HIGH_WATER = 1024 * 1024;

/** Pauses `source` for `ms`, then until `ready()`, then lets it go on. */
function hold(source: { pause(): unknown; resume(): unknown }, ms: number, ready: () => boolean): void {
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
function sendPaced(socket: WebSocket, data: Buffer, source: ClientChannel, meter: ByteMeter): void {
  socket.send(data);
  const wait = meter.take(data.length);
  if ((wait === 0 && socket.bufferedAmount <= HIGH_WATER) || source.isPaused()) return;
  hold(source, wait, () => socket.bufferedAmount <= HIGH_WATER / 2 || socket.readyState !== socket.OPEN);
}

/** Writes to the channel, pausing the WebSocket until the channel drains when it is full, and as the meter asks. */
function writePaced(channel: ClientChannel, data: Buffer, socket: WebSocket, meter: ByteMeter): void {
  const full = !channel.write(data);
  const wait = meter.take(data.length);
  if (!full && wait === 0) return;
  let drained = !full;
  if (full) channel.once('drain', () => (drained = true));
  hold(socket, wait, () => drained || socket.readyState !== socket.OPEN);
}

/**
 * A forwarded TCP connection on the renter's WebSocket, joined to the daemon's dial-back WebSocket (relay.ts `dial`),
 * message for message both ways at the session's meter's pace, the slower side setting it. The workload's side
 * closing ends the renter's with 1000; the renter's closing closes the daemon's (the daemon then ends the
 * connection's input); `end(reason)` ends both from outside (the session ended), the renter's with 1001.
 */
export function joinSockets(renter: WebSocket, dialled: Dialled, meter: ByteMeter): { end(reason: string): void } {
  const machine = dialled.socket;
  const relay = (from: WebSocket, to: WebSocket) =>
    from.on('message', (data: Buffer, isBinary: boolean) => {
      const bytes = isBinary ? data : Buffer.from(data);
      if (bytes.length === 0 || to.readyState !== to.OPEN) return;
      to.send(bytes, { binary: true });
      const wait = meter.take(bytes.length);
      if ((wait === 0 && to.bufferedAmount <= HIGH_WATER) || from.isPaused) return;
      hold(from, wait, () => to.bufferedAmount <= HIGH_WATER / 2 || to.readyState !== to.OPEN);
    });
  // What the daemon's side said before the renter's was there, first.
  for (const early of dialled.take()) renter.send(early, { binary: true });
  relay(renter, machine);
  relay(machine, renter);
  machine.resume();
  machine.once('close', () => {
    if (renter.readyState === renter.OPEN) renter.close(1000);
  });
  renter.once('close', () => {
    if (machine.readyState === machine.OPEN) machine.close(1000);
    else machine.terminate();
  });
  machine.on('error', () => renter.terminate());
  renter.on('error', () => machine.terminate());
  return {
    end: (reason) => {
      if (renter.readyState === renter.OPEN) renter.close(1001, reason.slice(0, 120));
      machine.terminate();
    },
  };
}

/**
 * A forwarded TCP connection on the WebSocket (`port-forward`): each binary message is bytes of the connection, both
 * ways. The workload's side closing ends it with 1000; the renter's closing ends the workload's input, then the
 * connection; `end(reason)` ends it from outside (the session ended) with 1001.
 */
export function pipeBytes(socket: WebSocket, channel: ClientChannel, meter: ByteMeter): { end(reason: string): void } {
  channel.on('error', () => {});
  channel.on('data', (d: Buffer) => sendPaced(socket, d, channel, meter));
  channel.once('close', () => {
    if (socket.readyState === socket.OPEN) socket.close(1000);
  });
  socket.on('message', (raw: Buffer, isBinary: boolean) => {
    const data = isBinary ? raw : Buffer.from(raw);
    if (data.length > 0) writePaced(channel, data, socket, meter);
  });
  socket.once('close', () => {
    channel.end();
    // A workload that never closes its side after the end of its input is closed for it.
    setTimeout(() => channel.close(), 5_000).unref();
  });
  return {
    end: (reason) => {
      if (socket.readyState === socket.OPEN) socket.close(1001, reason.slice(0, 120));
      channel.close();
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
  const send = (id: number, data: Buffer) => {
    bytesOut += data.length;
    sendPaced(socket, Buffer.concat([Buffer.of(id), data]), channel, opts.meter);
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
      writePaced(channel, body, socket, opts.meter);
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
