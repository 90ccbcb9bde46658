/**
 * Keyset paging of the billing lists (a wallet's transactions, billing
 * records), newest first. A page ends at a position: the last row's sort time
 * exactly as PostgreSQL printed it (microseconds, UTC) and its ID, so the next
 * page starts strictly after that row and pages never skip or repeat rows
 * while new ones arrive. The cursor is common's envelope (`encodeCursor`) of
 * `[at, id]`; what the lists answer with it is the platform's one paging
 * contract (README "Paging"). The position, its cursor and the page are
 * common's keyset helpers (`@gpu/common` `paging.ts`), which auth's client list
 * uses too.
 */
export { type KeysetPosition, keysetPage, type Page } from '@gpu/common';
