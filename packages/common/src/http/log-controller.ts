/**
 * Fastify's request log lines ("incoming request", "request completed", ...), with the first one written a little
 * later than Fastify writes it: from an `onRequest` hook after the tracing hooks (app.ts), once the request's server
 * span exists, so that it names the request's trace and span (`trace_id`, `span_id`: the loggers' mixin) as every
 * later line of the request does. Fastify writes it as the request is made, before any hook.
 */
import { type FastifyReply, type FastifyRequest, LogController } from 'fastify';

export class RequestLogController extends LogController {
  /** Fastify's call, as the request is made: nothing yet (`incomingRequestNow` writes the line). */
  override incomingRequest(): void {}

  /** Writes the request's "incoming request" line (unless request logging is off). */
  incomingRequestNow(request: FastifyRequest, reply: FastifyReply): void {
    super.incomingRequest(request, reply);
  }
}
