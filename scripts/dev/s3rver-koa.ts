/**
 * What the dev server's additions to s3rver share: the part of s3rver's Koa context they read and write, S3's XML
 * answers and errors, and their place in s3rver's middleware (right after its request logger, before its XML encoder
 * and router: an addition made later runs before those made earlier).
 */
import type S3rver from 's3rver';

export interface KoaContext {
  method: string;
  url: string;
  headers: Record<string, string | undefined>;
  status: number;
  type: string;
  body: unknown;
}

export type Middleware<C = KoaContext> = (ctx: C, next: () => Promise<void>) => unknown;

export const xmlEscape = (s: string) =>
  s.replace(/[<>&'"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c] ?? c);

/** An XML answer. */
export function answer(ctx: Pick<KoaContext, 'status' | 'type' | 'body'>, status: number, xml: string): void {
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n${xml}`;
}

/** S3's error document. */
export function s3Error(
  ctx: Pick<KoaContext, 'status' | 'type' | 'body'>,
  status: number,
  code: string,
  message: string,
): void {
  answer(ctx, status, `<Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message></Error>`);
}

/** Puts `middleware` in front of s3rver's routes and of the additions made before it. */
export function addMiddleware<C>(server: S3rver, middleware: Middleware<C>): void {
  const stack = (server as unknown as { middleware: unknown[] }).middleware;
  stack.splice(1, 0, middleware);
}
