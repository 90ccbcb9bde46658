/**
 * The platform's one paging contract, codec side. Every list pages by keyset:
 * the response names the position after its last item as an opaque cursor,
 * and the next request passes it back as `?cursor=`. A cursor is the
 * base64url JSON array of that position's values (a sort value, an ID, a key),
 * exact as the database printed them, so the next page starts strictly after
 * the row and not after a rounded copy of it. What a cursor means is the
 * list's business; this module only writes and reads the envelope, and names
 * the one error a cursor the service did not write gets (400 INVALID_CURSOR).
 * The HTTP side (headers, the `Link` to the next page) is `http/paging.ts`.
 */
import { AppError } from './errors.ts';

/** A value in a cursor's position. */
export type CursorValue = string | number;

/** Cursor text for a position. */
export function encodeCursor(position: readonly CursorValue[]): string {
  return Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
}

/** Longest cursor text a list accepts (a query parameter's bound). */
export const MAX_CURSOR_LENGTH = 1024;

/**
 * The position of cursor text, or undefined when the text is not a cursor of `arity` values (a forged or mangled
 * cursor). Each list then checks its values' meaning and answers `invalidCursor` when they make none.
 */
export function decodeCursor(text: string, arity: number): CursorValue[] | undefined {
  if (text.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed) || parsed.length !== arity) return undefined;
  if (!parsed.every((v) => typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)))) return undefined;
  return parsed as CursorValue[];
}

/** The error of a cursor the list did not write, or one made for another query (400 INVALID_CURSOR). */
export function invalidCursor(detail = 'not a cursor returned by this service'): AppError {
  return new AppError('invalid', 'INVALID_CURSOR', `invalid cursor: ${detail}`, {
    errors: [{ path: 'querystring.cursor', message: detail }],
  });
}
