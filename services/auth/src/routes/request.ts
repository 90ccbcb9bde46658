/** The auth context of one request: its logger (request and correlation IDs) and where it came from (the audit trail). */
import type { Logger } from '@gpu/common';
import type { AuthContext } from '../domain/context.ts';

export function forRequest(ctx: AuthContext, request: { log: unknown; clientIp: string; id: unknown }): AuthContext {
  return { ...ctx, logger: request.log as Logger, origin: { ip: request.clientIp, requestId: String(request.id) } };
}
