/**
 * The platform's one paging contract, HTTP side. Every list takes the same `limit` and `cursor` query parameters
 * (`pageQuery`: one range, one default, one meaning) and answers a JSON array of its items; when more items follow,
 * the response carries the next page's cursor in `X-Next-Cursor` and the next page's URL in
 * `Link: <...>; rel="next"` (RFC 8288). The last page carries neither header. (docs/conventions.md, "Paging".)
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { MAX_CURSOR_LENGTH } from '../paging.ts';

export const NEXT_CURSOR_HEADER = 'x-next-cursor';

/** The page size of every list: at most `max` items, `default` when the request names none. */
export const PAGE_LIMIT = { min: 1, max: 1000, default: 100 } as const;

/** A query string's digits as a number; anything else as it came, for the number schema to refuse (`1e2`, ` 5`). */
const digits = (value: unknown) => (typeof value === 'string' && /^\d{1,16}$/.test(value) ? Number(value) : value);

/**
 * A whole number in a query string, from `min` to `max`: documented as an integer (clients send a number), read from
 * digits only (`1e3`, ` 5`, `0x10` are a 400).
 */
export const queryInteger = (min: number, max: number) => z.preprocess(digits, z.number().int().min(min).max(max));

/**
 * The query parameters of every list (spread them into its querystring schema): `limit`, an integer in
 * `PAGE_LIMIT`'s range (its default when absent; digits only, anything else a 400), and `cursor`, the opaque
 * position the previous page named (400 `INVALID_CURSOR` for one the list did not write).
 */
export const pageQuery = {
  limit: z
    .preprocess(digits, z.number().int().min(PAGE_LIMIT.min).max(PAGE_LIMIT.max).default(PAGE_LIMIT.default))
    .describe(
      `how many items the page holds at most (${PAGE_LIMIT.min}-${PAGE_LIMIT.max}, default ${PAGE_LIMIT.default}); ` +
        'fewer does not mean the last page: the last page names no next one',
    ),
  cursor: z
    .string()
    .max(MAX_CURSOR_LENGTH)
    .optional()
    .describe(
      'where the page starts: the `X-Next-Cursor` of the previous page (also in its `Link` rel="next"); ' +
        'absent: the first page',
    ),
};

/** Sets the next-page headers when `cursor` is not null: `X-Next-Cursor` and a `Link` to the same query with it. */
export function setNextPage(request: FastifyRequest, reply: FastifyReply, cursor: string | null | undefined): void {
  if (!cursor) return;
  const url = new URL(request.url, 'http://service.invalid');
  url.searchParams.set('cursor', cursor);
  reply.header(NEXT_CURSOR_HEADER, cursor).header('link', `<${url.pathname}${url.search}>; rel="next"`);
}
