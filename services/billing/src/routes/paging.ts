/** The `cursor` query parameter of the keyset-paged lists (domain/keyset.ts; README "Paging"). */
import { MAX_CURSOR_LENGTH } from '@gpu/common';
import { z } from 'zod';

/** Where the page asked for starts; 400 INVALID_CURSOR when the text is not a cursor these lists wrote. */
export { afterCursor } from '@gpu/common';

/** The query parameters every list takes: `limit` (1-200, default 50) and `cursor`. */
export const pageQuery = {
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z
    .string()
    .max(MAX_CURSOR_LENGTH)
    .optional()
    .describe('`X-Next-Cursor` (or `next_cursor`) of the previous page'),
};
