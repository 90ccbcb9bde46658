/**
 * The platform's one paging contract, HTTP side. A list takes `limit` and
 * `cursor` query parameters; when more items follow, its response carries the
 * next page's cursor in `X-Next-Cursor` and the next page's URL in
 * `Link: <...>; rel="next"` (RFC 8288), whatever the body's shape. A list
 * whose body is an object also repeats the cursor as `next_cursor`. The last
 * page carries neither header.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

export const NEXT_CURSOR_HEADER = 'x-next-cursor';

/** Sets the next-page headers when `cursor` is not null: `X-Next-Cursor` and a `Link` to the same query with it. */
export function setNextPage(request: FastifyRequest, reply: FastifyReply, cursor: string | null | undefined): void {
  if (!cursor) return;
  const url = new URL(request.url, 'http://service.invalid');
  url.searchParams.set('cursor', cursor);
  reply.header(NEXT_CURSOR_HEADER, cursor).header('link', `<${url.pathname}${url.search}>; rel="next"`);
}
