/**
 * A WebSocket's peer, checked alive: a ping every interval, and the socket terminated once nothing at all came from
 * the peer for two intervals. A peer gone without a word (its machine off, its network cut, a NAT that forgot it) is
 * so noticed within three intervals rather than when TCP gives up (never, on a quiet connection), and what it held (a
 * stream's slot, the program it ran) is let go. Every WebSocket peer answers pings by itself (RFC 6455 5.5.2).
 *
 * Any frame is a sign of life, its own pings too: a peer that stopped reading (`gpu exec | less` at its prompt)
 * answers no ping, but the platform's clients ping on their own (the CLI every 30 s), which needs no reading. A
 * connection held back on this side is not judged: while this side does not read (paused: what it reads waits on a
 * slower reader) nothing from the peer can be seen, and while what it sent waits to be written, nor can a ping reach
 * it; such a peer, if gone, is TCP's to find (its retransmissions give up).
 */

/** What is needed of a WebSocket (ws's). */
export interface Pingable {
  ping(): void;
  terminate(): void;
  readonly isPaused: boolean;
  readonly bufferedAmount: number;
  on(event: 'pong' | 'ping' | 'message', listener: () => void): unknown;
  once(event: 'close', listener: () => void): unknown;
}

/** Pings `ws` every `everyMs` until it closes, terminating it once nothing came from its peer for two of them. */
export function keepPinging(ws: Pingable, everyMs: number, now: () => number = Date.now): void {
  let heard = now();
  const alive = () => {
    heard = now();
  };
  for (const event of ['pong', 'ping', 'message'] as const) ws.on(event, alive);
  const timer = setInterval(() => {
    if (ws.isPaused || ws.bufferedAmount > 0) {
      heard = now();
      return;
    }
    if (now() - heard > 2 * everyMs) {
      ws.terminate();
      return;
    }
    try {
      ws.ping();
    } catch {
      // Closing meanwhile: its close stops the timer.
    }
  }, everyMs);
  timer.unref();
  ws.once('close', () => clearInterval(timer));
}
