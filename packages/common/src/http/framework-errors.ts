/**
 * Errors Fastify and Node's HTTP parser answer before a route runs. Fastify's
 * `frameworkErrors` (a URL that does not decode, an over-long path parameter)
 * gets a request but no hooks: it is given the request's IDs here and the same
 * problem body as any other error. A `clientError` (malformed request line or
 * header, headers too large, client too slow) comes before there is a request
 * at all: it gets a minimal problem body, a fresh request ID to find its log
 * line by, and `Connection: close`, since the connection cannot be trusted. (Except a body cut short by a
 * half-close, which a request streaming its body may answer itself: body-cut.ts.)
 */
import { randomUUID } from 'node:crypto';
import { type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, errors } from '../errors.ts';
import { handOverBodyCut } from './body-cut.ts';
import { answerError, PROBLEM_CONTENT_TYPE } from './error-handler.ts';
import { problemOf } from './problem.ts';
import { correlationIdOf, echoIds, REQUEST_ID_HEADER } from './request-context.ts';

/** Fastify's `frameworkErrors` option: the problem body, with the request and correlation IDs. */
export function onFrameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  // No onRequest hook ran for this request: give it what the request-context plugin would have.
  request.correlationId = correlationIdOf(request.raw);
  echoIds(request, reply);
  void answerError(error, request, reply);
}

function clientProblem(err: NodeJS.ErrnoException): AppError {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new AppError('headers_too_large', 'HEADERS_TOO_LARGE', 'the request headers are too large');
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new AppError('too_large', 'PAYLOAD_TOO_LARGE', 'the chunk extensions are too large');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new AppError('client_timeout', 'CLIENT_TIMEOUT', 'the request was not received in time');
    default:
      return errors.badRequest('MALFORMED_REQUEST', 'the request is not valid HTTP');
  }
}

/** Node's own field: the response now being written on a connection (ServerResponse.assignSocket), if any. */
type HttpSocket = Socket & { _httpMessage?: ServerResponse | null };

/** Connections whose problem answer waits for the answers ahead of it (a second parser error adds nothing). */
const answering = new WeakSet<Socket>();

/**
 * Fastify's `clientErrorHandler` server option (Node's `clientError` event): answers a problem body on the raw
 * socket and closes it. A malformed request pipelined behind others is answered after them: written at once, the
 * problem would be read as the answer to the first (or land inside a body being streamed), and the first would be
 * lost.
 */
export function onClientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
  // A reset connection has nobody to answer (see Node's 'clientError' documentation).
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // A body cut by the client's half-close, on a request whose handler answers that itself (body-cut.ts).
  if (handOverBodyCut(err, socket)) return;
  if (answering.has(socket)) return;
  answering.add(socket);
  const problem = problemOf(clientProblem(err));
  const requestId = randomUUID();
  this.log.info({ request_id: requestId, code: problem.code, status: problem.status, err_code: err.code }, err.message);
  const write = () => {
    if (socket.writable) {
      const body = JSON.stringify({ ...problem, request_id: requestId });
      socket.write(
        `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}\r\n` +
          `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n` +
          `${REQUEST_ID_HEADER}: ${requestId}\r\n` +
          'Connection: close\r\n\r\n' +
          body,
      );
    }
    socket.destroy(err);
  };
  /** `then` once `response` is out (or its connection gone): one listener pair, gone when either fires. */
  const after = (response: ServerResponse, then: () => void) => {
    const next = () => {
      response.off('finish', next).off('close', next);
      then();
    };
    response.once('finish', next).once('close', next);
  };
  const answer = (): void => {
    if (socket.destroyed) return;
    const ahead = (socket as HttpSocket)._httpMessage;
    if (!ahead || ahead.writableFinished) {
      write();
      return;
    }
    // The response of the request whose own body failed to parse: its handler waits for a body that never comes.
    // Answered now, as Node answers (nothing is written into an answer already begun); one the handler already ended
    // (a refusal before the body was read) goes out whole first, and is the request's answer.
    if (!ahead.req?.complete) {
      if (ahead.writableEnded) after(ahead, () => socket.destroy(err));
      else if (ahead.headersSent) socket.destroy(err);
      else write();
      return;
    }
    // An answer ahead of it, for a request read whole: once it is out, the next (Node assigns the next pipelined
    // response as one finishes). Once per response: its 'close' follows its 'finish'.
    after(ahead, answer);
  };
  answer();
}
