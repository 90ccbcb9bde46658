/**
 * The platform's one paging contract, read: a list answers a page of items and, when more follow, the next page's
 * cursor in `X-Next-Cursor` (docs/conventions.md, "Paging").
 */
import { endlessListGuard, unwrap } from '@gpu/client';

const NEXT_CURSOR = 'x-next-cursor';

/**
 * Every item of a list, page after page (`page(cursor)` asks for one), or its first `limit` items. A cursor named a
 * second time is a list that would never end (the platform's, or something answering as it): a failure, not a loop.
 */
export async function everyPage<T>(
  page: (cursor: string | undefined) => Promise<{ data?: T[]; error?: unknown; response: Response }>,
  limit = Number.POSITIVE_INFINITY,
): Promise<T[]> {
  const items: T[] = [];
  const guard = endlessListGuard();
  let cursor: string | undefined;
  do {
    const answer = await page(cursor);
    items.push(...unwrap(answer));
    cursor = answer.response.headers.get(NEXT_CURSOR) ?? undefined;
    if (cursor !== undefined) guard(cursor);
  } while (cursor && items.length < limit);
  return items.slice(0, limit);
}

/** How many items one request of a paged list asks for: `--page-size`, or fewer when `--limit` wants fewer. */
export function pageRequest(opts: { limit?: number; pageSize: number }): number {
  return Math.min(opts.limit ?? opts.pageSize, opts.pageSize);
}
