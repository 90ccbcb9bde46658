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
import { zTimestamp } from './timestamp.ts';

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
  // No NUL in a string: no cursor a list writes holds one (PostgreSQL's text cannot), and the database refuses it.
  const value = (v: unknown) =>
    (typeof v === 'string' && !v.includes('\u0000')) || (typeof v === 'number' && Number.isFinite(v));
  if (!parsed.every(value)) return undefined;
  return parsed as CursorValue[];
}

/** The error of a cursor the list did not write, or one made for another query (400 INVALID_CURSOR). */
export function invalidCursor(detail = 'not a cursor returned by this service'): AppError {
  return new AppError('invalid', 'INVALID_CURSOR', `invalid cursor: ${detail}`, {
    errors: [{ path: 'querystring.cursor', message: detail }],
  });
}

/**
 * A keyset position on a timestamp column and a UUID: the row's time exactly as PostgreSQL printed it (microseconds,
 * UTC: `db/keyset.ts`'s `cursorAt`) and the row's ID, so the next page starts strictly after that row and pages never
 * skip or repeat rows while new ones arrive. Its cursor is `[at, id]`.
 */
export interface KeysetPosition {
  at: string;
  id: string;
}

/**
 * A position's time: in UTC (`Z`) as the services write it (`cursorAt`'s microseconds; storage's uploads, JavaScript's
 * milliseconds), and a date within the platform's range. A time with an offset is no cursor of ours, and some reach SQL
 * as a 500 (an offset past PostgreSQL's ±15:59 such as `+20:00`), as would a year 0.
 */
const POSITION_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z$/;
const positionTime = zTimestamp();

/**
 * Whether `value` is a UUID as PostgreSQL reads one, any case (36 dashes would reach SQL as a 500): 8-4-4-4-12 hex
 * digits. Checked character by character, not with a regular expression: every NATS heartbeat checks three (the
 * provider and the owner and daemon client its subject names), and the expression cost about 230 ns each there.
 */
export function isUuid(value: string): boolean {
  if (value.length !== 36) return false;
  for (let i = 0; i < 36; i++) {
    const c = value.charCodeAt(i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (c !== 45) return false; // -
    } else if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70))) return false; // 0-9 a-f A-F
  }
  return true;
}

/** The cursor text of a position. */
export function positionCursor(p: KeysetPosition): string {
  return encodeCursor([p.at, p.id]);
}

/** The position of cursor text; undefined when the text is not a cursor of a position (`[at, id]`). */
export function cursorPosition(text: string): KeysetPosition | undefined {
  const values = decodeCursor(text, 2);
  if (!values) return undefined;
  const [at, id] = values;
  if (typeof at !== 'string' || typeof id !== 'string') return undefined;
  if (!isUuid(id) || !POSITION_TIME.test(at) || !positionTime.safeParse(at).success) return undefined;
  return { at, id };
}

/** Where the page asked for starts (none without a cursor); 400 INVALID_CURSOR when the text is not a position's. */
export function afterCursor(text: string | undefined): KeysetPosition | undefined {
  if (text === undefined) return undefined;
  const position = cursorPosition(text);
  if (!position) throw invalidCursor();
  return position;
}

/** One page of a list and the cursor of the next (null on the last page). */
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/**
 * The page of `limit` items out of `rows`, which holds up to `limit + 1` rows (one more than a page, read to know
 * whether another page follows), each with its `cursor_at`.
 */
export function keysetPage<T extends { id: string; cursor_at: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return {
    items,
    nextCursor: rows.length > limit && last ? positionCursor({ at: last.cursor_at, id: last.id }) : null,
  };
}
