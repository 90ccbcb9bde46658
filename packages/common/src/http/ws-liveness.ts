/**
 * A WebSocket's peer, checked alive: a ping every interval, and the socket terminated when the last one went
 * unanswered. A peer gone without a word (its machine off, its network cut, a NAT that forgot it) is noticed within
 * two intervals rather than when TCP gives up (never, on a quiet connection), so what it held (a stream's slot, the
 * program it ran) is let go. Every WebSocket peer answers pings by itself (RFC 6455 5.5.2).
 */

/** What is needed of a WebSocket (ws's). */
export interface Pingable {
  ping(): void;
  terminate(): void;
  on(event: 'pong', listener: () => void): unknown;
  once(event: 'close', listener: () => void): unknown;
}

/** Pings `ws` every `everyMs` until it closes, terminating it once a ping went unanswered for a whole interval. */
export function keepPinging(ws: Pingable, everyMs: number): void {
  let answered = true;
  ws.on('pong', () => {
    answered = true;
  });
  const timer = setInterval(() => {
    if (!answered) {
      ws.terminate();
      return;
    }
    answered = false;
    try {
      ws.ping();
    } catch {
      // Closing meanwhile: its close stops the timer.
    }
  }, everyMs);
  timer.unref();
  ws.once('close', () => clearInterval(timer));
}
