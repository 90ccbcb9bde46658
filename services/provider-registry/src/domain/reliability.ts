/**
 * A machine's reliability, from what the registry already sees: how much of the last 30 days it was up (`idle` or
 * `busy`) against down (`offline` or `error`; time in `maintenance` counts as neither), and how many of the rental
 * sessions that ended on it ended by its fault. The database keeps the books as statuses change and sessions end
 * (see the reliability migration); this module says what the numbers mean.
 */

import { PROVIDER_FAULT_END_REASONS } from '@gpu/common';

/**
 * Whether a session's end counts against its machine: billing's reasons for a machine that went away under a running
 * rental, or whose owner ended it (`provider_ended`: billing records that reason whatever the owner's request said).
 */
export const isProviderFault = (endReason: string | null | undefined) =>
  endReason !== null &&
  endReason !== undefined &&
  (PROVIDER_FAULT_END_REASONS as readonly string[]).includes(endReason);

/** What the books hold for one machine, as the database reads them. */
export interface ReliabilityBooks {
  /** Seconds up and down in the window, the open interval of the current status included. */
  upSeconds: number;
  downSeconds: number;
  sessionsEnded: number;
  sessionsFailed: number;
  /**
   * One number to sort and filter by, from 0 to 1: uptime × session success, each counted as 1 while it has no
   * observation (a new machine starts at 1 and is judged by what it does; the counts tell how much backs it).
   * The database works it out (`provider_reliability_of`), so a machine's reliability and the offers sorted by it
   * say the same number.
   */
  score: number;
}

export interface Reliability extends ReliabilityBooks {
  /** Up / (up + down) over the window; null when nothing was observed. */
  uptime: number | null;
  /** Sessions that ended without the machine's fault, out of all that ended; null without one. */
  sessionSuccess: number | null;
}

/** The parts of the reliability the books say. */
export function reliabilityOf(books: ReliabilityBooks): Reliability {
  const observed = books.upSeconds + books.downSeconds;
  const uptime = observed > 0 ? books.upSeconds / observed : null;
  const sessionSuccess =
    books.sessionsEnded > 0 ? (books.sessionsEnded - books.sessionsFailed) / books.sessionsEnded : null;
  return { ...books, uptime, sessionSuccess };
}
