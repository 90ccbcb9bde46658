/**
 * JSON-RPC 2.0 envelope handling (single and batch requests) over a method table.
 */
import { RpcError } from './chain.ts';
import type { Handler } from './rpc.ts';

interface Request {
  jsonrpc?: string;
  id?: unknown;
  method?: unknown;
  params?: unknown;
}

function errorReply(id: unknown, code: number, message: string, data?: unknown) {
  return { jsonrpc: '2.0', id: id ?? null, error: data === undefined ? { code, message } : { code, message, data } };
}

/** Answers one request object; `onError` sees unexpected (internal) failures. */
function answerOne(handlers: Record<string, Handler>, req: unknown, onError: (e: unknown) => void) {
  if (!req || typeof req !== 'object' || Array.isArray(req)) return errorReply(null, -32600, 'Invalid request');
  const { id, method, params } = req as Request;
  if (typeof method !== 'string') return errorReply(id, -32600, 'Invalid request');
  const handler = Object.hasOwn(handlers, method) ? handlers[method] : undefined;
  if (!handler) return errorReply(id, -32601, 'Method not found');
  if (params !== undefined && !Array.isArray(params))
    return errorReply(id, -32602, 'Invalid params: expected an array');
  try {
    return { jsonrpc: '2.0', id, result: handler((params as unknown[]) ?? []) };
  } catch (e) {
    if (e instanceof RpcError) return errorReply(id, e.code, e.message, e.data);
    onError(e);
    return errorReply(id, -32603, `Internal error: ${(e as Error).message}`);
  }
}

/** Answers a request body (text): a single request or a batch. */
export function answerBody(handlers: Record<string, Handler>, text: string, onError: (e: unknown) => void): unknown {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return errorReply(null, -32700, 'Parse error');
  }
  if (Array.isArray(body)) {
    if (body.length === 0) return errorReply(null, -32600, 'Invalid request');
    return body.map((r) => answerOne(handlers, r, onError));
  }
  return answerOne(handlers, body, onError);
}
