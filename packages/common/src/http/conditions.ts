/**
 * `If-Match` (RFC 9110 §13.1.1): a request that changes a resource only while it is as the client last saw it. The
 * header is `*` (any current representation) or a list of entity tags, compared strongly: a weak tag (`W/"..."`)
 * never matches, and neither does anything when there is no current representation.
 */
import { z } from 'zod';

/** The header's schema, as each route that takes it declares it, described as given. */
export function ifMatchHeader(description: string) {
  return z.string().min(1).max(1024).optional().describe(description);
}

/** Whether an `If-Match` header holds for the current entity tag (undefined: nothing there). */
export function ifMatchHolds(header: string, current: string | undefined): boolean {
  if (current === undefined) return false;
  const tags = header.split(',').map((tag) => tag.trim());
  // `*`: any current representation; a tag: the same strong tag.
  return tags.includes('*') || (!current.startsWith('W/') && tags.includes(current));
}

/** An entity tag without the quotes around it (stores and clients write them either way); blanks trimmed. */
const bareTag = (tag: string) => tag.trim().replace(/^"(.*)"$/, '$1');

/**
 * Whether two entity tags name the same version, each given with or without its quotes (a part's ETag as a client
 * echoes it, a source's as the store tags it). A weak tag (`W/"..."`) names no version to compare strongly.
 */
export function sameEntityTag(a: string, b: string): boolean {
  const left = bareTag(a);
  return !left.startsWith('W/') && left !== '' && left === bareTag(b);
}
