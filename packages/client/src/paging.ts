/**
 * Walking a paged list (`X-Next-Cursor`, absent on the last page) against an answer that would never end: a cursor
 * named a second time (the platform's, or anything answering as it), or more pages than the caller can want.
 */

/**
 * A guard for one walk: call it with each next cursor a page names, before asking for that page; it throws for a list
 * that does not end (a cursor named again, or one past `maxPages` cursors).
 */
export function endlessListGuard(maxPages = Number.POSITIVE_INFINITY): (cursor: string) => void {
  const seen = new Set<string>();
  return (cursor) => {
    if (seen.has(cursor)) throw new Error(`the list does not end: its page ${seen.size + 1} named an earlier cursor`);
    if (seen.size >= maxPages) throw new Error(`the list does not end: more than ${maxPages} further pages`);
    seen.add(cursor);
  };
}
