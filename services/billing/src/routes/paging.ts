/** The `cursor` query parameter of the keyset-paged lists (domain/keyset.ts; README "Paging"). */
import { invalidCursor, MAX_CURSOR_LENGTH } from '@gpu/common';
import { z } from 'zod';
import { cursorPosition, type KeysetPosition } from '../domain/keyset.ts';

/** The query parameters every list takes: `limit` (1-200, default 50) and `cursor`. */
export const pageQuery = {
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z
    .string()
    .max(MAX_CURSOR_LENGTH)
    .optional()
    .describe('`X-Next-Cursor` (or `next_cursor`) of the previous page'),
};

/** Where the page asked for starts; 400 INVALID_CURSOR when the text is not a cursor these lists wrote. */
export function afterCursor(text: string | undefined): KeysetPosition | undefined {
  if (text === undefined) return undefined;
  const position = cursorPosition(text);
  if (!position) throw invalidCursor();
  return position;
}
