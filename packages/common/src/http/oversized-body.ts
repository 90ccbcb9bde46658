/**
 * A request body too large, refused before it was read: the limit every service's JSON routes share (the gateways
 * refuse larger bodies first, by the same number), and the graceful close that makes sure the caller reads the 413.
 *
 * A server that answers before the body arrived and then closes the connection at once (Node does, on a
 * `Connection: close` response) leaves the rest of the body unread: the kernel answers those bytes with a reset,
 * which can erase the response from the caller's buffers before the caller read it (RFC 9112, section 9.6). A
 * reverse proxy still writing the body then sees a broken connection and no answer, and says 502: through the
 * gateway, most 1-3 MiB bodies came back as 502 rather than 413. So the connection closes as nginx closes one
 * (`lingering_close`): the response, then a half-close (FIN), then what the caller still sends is read and thrown
 * away until it stops, for at most 30 s, and at most 5 s of silence, before the close.
 *
 * Imported on its own (`@gpu/common/oversized-body`) by the gateway, which must not load the services' stack.
 */
import type { Socket } from 'node:net';

/** The largest body a service's JSON route reads (Fastify's `bodyLimit` in `createApp`): 1 MiB. */
export const JSON_BODY_LIMIT = 1024 * 1024;

/** How long a refused body is read and thrown away before the connection closes: nginx's `lingering_*` defaults. */
const LINGER_TOTAL_MS = 30_000;
const LINGER_IDLE_MS = 5_000;

/**
 * Makes the connection of a response sent before its request's body was read close gracefully: once the response
 * is written, the server half-closes and drains what the caller still sends, then closes. Call it before the
 * response ends, on a response that closes its connection (`Connection: close`); it changes nothing else.
 */
export function lingerBeforeClose(socket: Socket | null | undefined): void {
  if (!socket || socket.destroyed) return;
  // Node's HTTP server ends a `Connection: close` response with `socket.destroySoon()`: FIN, then destroy as soon as
  // the FIN is written, whatever the caller is still sending. Here the destroy waits for the caller to stop.
  socket.destroySoon = function lingeringClose(this: Socket) {
    if (this.writable) this.end();
    const close = () => this.destroy();
    const total = setTimeout(close, LINGER_TOTAL_MS);
    total.unref();
    this.setTimeout(LINGER_IDLE_MS, close);
    this.once('close', () => clearTimeout(total));
    // Until then the server reads on (its parser drops the refused body's bytes); the caller's own FIN, after our
    // FIN was written, ends the socket, which then closes by itself.
  };
}
