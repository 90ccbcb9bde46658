/**
 * A byte stream over an HTTP/1.1 upgrade: `Connection: Upgrade`, `Upgrade: tcp`, answered `101 Switching Protocols`,
 * after which the connection carries the stream's bytes as they are, both ways, with TCP's own half-close (the way
 * Docker's attach hijacks its connection). A forwarded port's bytes take it from the renter to billing and from the
 * daemon back to billing: no frame to parse, mask or build at either end, so a relay only moves bytes
 * (docs/architecture.md, "Reach"). The request is an ordinary one until the 101: its headers (the bearer token) are
 * checked, and a refusal is an ordinary answer with a problem body. Every gateway in front passes it as it passes a
 * WebSocket.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex, Writable } from 'node:stream';

/**
 * How long a raw stream may be silent before TCP probes its peer: a stream left half-open by a peer that went away
 * (a renter's end passed on, a program that never ends its side) is found dead and closed rather than held.
 */
const KEEPALIVE_MS = 30_000;

/** The `Upgrade` token of a raw byte stream. */
export const RAW_UPGRADE = 'tcp';

/** Whether a request asks to become a raw byte stream (`Upgrade: tcp`). */
export function isRawUpgrade(headers: IncomingHttpHeaders): boolean {
  return (
    String(headers.upgrade ?? '')
      .trim()
      .toLowerCase() === RAW_UPGRADE
  );
}

/** The server's answer when it did not switch: its status, headers and body (a problem, usually). */
export class UpgradeRefused extends Error {
  constructor(
    readonly status: number,
    readonly headers: IncomingHttpHeaders,
    readonly body: string,
  ) {
    super(`the upgrade was answered ${status}`);
  }

  /** The body as JSON (a problem), or `{ detail }` with the text when it is none (a proxy's page). */
  problem(): Record<string, unknown> {
    try {
      const parsed = JSON.parse(this.body) as unknown;
      if (parsed && typeof parsed === 'object') return parsed as Record<string, unknown>;
    } catch {
      // Not JSON.
    }
    return { detail: this.body.slice(0, 300) || this.message };
  }
}

/**
 * Opens a raw byte stream: `GET url` with `Upgrade: tcp` and the headers given. Resolves with the connection once it
 * was switched (half-open allowed, no Nagle delay; any bytes that came with the 101 are read first); rejects with
 * `UpgradeRefused` for any other answer, or with why nothing answered (`signal` aborted: an AbortError).
 */
export function openRawUpgrade(
  url: string,
  opts: { headers?: Record<string, string>; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<Socket> {
  const target = new URL(url);
  const send = target.protocol === 'https:' || target.protocol === 'wss:' ? httpsRequest : httpRequest;
  target.protocol = target.protocol === 'wss:' ? 'https:' : target.protocol === 'ws:' ? 'http:' : target.protocol;
  return new Promise<Socket>((resolve, reject) => {
    const req = send(target, {
      method: 'GET',
      headers: { ...opts.headers, connection: 'Upgrade', upgrade: RAW_UPGRADE },
      agent: false,
      timeout: opts.timeoutMs ?? 30_000,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    req.once('upgrade', (_res, socket: Socket, head: Buffer) => {
      socket.setTimeout(0);
      socket.allowHalfOpen = true;
      socket.setNoDelay(true);
      socket.setKeepAlive(true, KEEPALIVE_MS);
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.once('end', () =>
        reject(new UpgradeRefused(res.statusCode ?? 502, res.headers, Buffer.concat(chunks).toString('utf8'))),
      );
      res.once('error', reject);
    });
    req.once('timeout', () => req.destroy(new Error(`${target.host} did not answer the upgrade in time`)));
    req.once('error', reject);
    req.end();
  });
}

/**
 * Switches a server's upgraded connection to a raw byte stream: writes the 101, then hands back the socket, with the
 * bytes that came after the request (`head`) read first.
 */
export function acceptRawUpgrade(socket: Duplex, head: Buffer | undefined): Duplex {
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${RAW_UPGRADE}\r\n\r\n`);
  const s = socket as Socket;
  s.setTimeout?.(0);
  s.setNoDelay?.(true);
  s.setKeepAlive?.(true, KEEPALIVE_MS);
  s.allowHalfOpen = true;
  if (head && head.length > 0) socket.unshift(head);
  return socket;
}

/** How much a destination may hold unsent before its source is read no more. */
const PUMP_HIGH_WATER = 1024 * 1024;

/** How a writer holds its source back: past a high-water mark of unsent bytes, and for as long as a pace asks. */
export interface Pacing {
  /** The most `to` may hold unsent before the source is paused (1 MiB). */
  highWater?: number;
  /** How long (ms) the source should wait after a chunk of this many bytes (a byte limit); 0 at once. */
  pace?: (bytes: number) => number;
}

/**
 * Writes `chunk` to `to`, then pauses `from` until `to` has drained, when it owes a drain and holds more than
 * `highWater` unsent, and
 * for as long as `pace` asks (both, where both hold it back): woken by the events, never by polling. A socket's own
 * 16 KiB high-water mark would pause the source after every chunk, as `pipe()` does: a relay moving a stream would
 * spend more on pausing and resuming than on the bytes.
 */
export function writePaced(
  to: Writable,
  chunk: Buffer,
  from: { pause(): unknown; resume(): unknown },
  pacing: Pacing = {},
): void {
  to.write(chunk);
  const wait = pacing.pace?.(chunk.length) ?? 0;
  // Full once a drain is owed and more than the high-water mark waits: a destination whose own mark is higher (an
  // SSH channel's 2 MiB) owes no drain below it, and waiting for one there would wait for ever.
  const full = to.writableNeedDrain && to.writableLength > (pacing.highWater ?? PUMP_HIGH_WATER);
  if (!full && wait === 0) return;
  from.pause();
  let waits = (full ? 1 : 0) + (wait > 0 ? 1 : 0);
  const done = () => {
    waits -= 1;
    if (waits === 0) from.resume();
  };
  if (full) to.once('drain', done);
  if (wait > 0) setTimeout(done, wait);
}

/** Passes `from`'s bytes to `to` as they come (`writePaced`), and `from`'s end as `to`'s. */
export function pump(from: Duplex, to: Duplex, pacing: Pacing = {}): void {
  from.on('data', (chunk: Buffer) => writePaced(to, chunk, from, pacing));
  from.once('end', () => to.end());
}

/**
 * Destroys `stream` once what was written to it before its end has gone out ('finish'), at once when it has or was
 * never ended, and after `graceMs` at most (a peer that reads no more is not waited on): for a relay whose other side
 * closed.
 */
export function destroyOnceWritten(stream: Writable, graceMs: number): void {
  if (stream.writableFinished || !stream.writableEnded) {
    stream.destroy();
    return;
  }
  const cut = setTimeout(() => stream.destroy(), graceMs).unref();
  stream.once('finish', () => {
    clearTimeout(cut);
    stream.destroy();
  });
}
