/**
 * Keyset-pagination cursors of the billing lists: an opaque base64url JSON
 * pair of the last row's sort timestamp (exact, as PostgreSQL printed it) and
 * its ID, so the next page starts strictly after that row.
 */
import { errors } from '@gpu/common';

export interface PageCursor {
  at: string;
  id: string;
}

export function encodeCursor(c: PageCursor): string {
  return Buffer.from(JSON.stringify([c.at, c.id]), 'utf8').toString('base64url');
}

/** The cursor's position; a 400 naming `querystring.cursor` when it is not one this API wrote. */
export function decodeCursor(cursor: string): PageCursor {
  try {
    const [at, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [string, string];
    if (typeof at !== 'string' || !/^[0-9a-f-]{36}$/.test(id) || Number.isNaN(Date.parse(at))) throw new Error();
    return { at, id };
  } catch {
    throw errors.validation('invalid cursor', [{ path: 'querystring.cursor', message: 'not a cursor from this API' }]);
  }
}
