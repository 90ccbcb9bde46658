/**
 * A request body cut short by the client's half-close: the client sent the headers and part of the body, then closed
 * its sending side (a FIN) before the body's last byte (its Content-Length, or a chunked body's last chunk), and is
 * still there to read an answer. Node reports that as a `clientError` (`HPE_INVALID_EOF_STATE`), which the app
 * answers by default with 400 MALFORMED_REQUEST on the raw socket before destroying it (framework-errors.ts; at once
 * when the answer to that request has not begun); the request's handler is never told, and the body it reads neither
 * ends nor fails.
 *
 * A handler that streams the body somewhere (the storage service's uploads) takes the cut over with `onBodyCut`: it
 * is called instead, abandons what it was writing and answers on its own reply, which the client can still read.
 */
import type { Socket } from 'node:net';
import type { FastifyRequest } from 'fastify';

/** Node's parser error for a connection that ended (half-closed) in the middle of a message. */
const EOF_MID_MESSAGE = 'HPE_INVALID_EOF_STATE';

const takers = new WeakMap<Socket, () => void>();

/**
 * Calls `onCut` when the client half-closes the connection before the request's body is complete, and leaves the
 * answer to the request's handler (the connection stays open for it). Returns the function that stops listening:
 * call it once the body was read or abandoned.
 */
export function onBodyCut(request: FastifyRequest, onCut: () => void): () => void {
  const socket = request.raw.socket;
  if (!socket) return () => {};
  takers.set(socket, onCut);
  return () => {
    if (takers.get(socket) === onCut) takers.delete(socket);
  };
}

/**
 * For the `clientError` handler: hands a half-close in the middle of a body to the request that asked for it with
 * `onBodyCut`. True when handed over (the handler answers; the socket must be left open), false otherwise.
 */
export function handOverBodyCut(err: NodeJS.ErrnoException, socket: Socket): boolean {
  if (err.code !== EOF_MID_MESSAGE) return false;
  const onCut = takers.get(socket);
  if (!onCut) return false;
  takers.delete(socket);
  onCut();
  return true;
}
