/**
 * A session's rates by minute of its clock. A session's rate is frozen at its start; only an interruptible session's
 * bid may change while it runs (domain/sessions/bids.ts), and then the session keeps its rates by minute (`rate_segments`): **each
 * minute is billed at the highest rate in force at any moment of it**. A raise prices the minute in progress at once;
 * a cut takes effect at the next minute. So a renter who raises a bid for a moment (to keep GPUs a higher bid would
 * take) pays the raise for that minute, and one who cuts it pays the old bid to the minute's end: no minute is ever
 * protected by a bid that did not pay for it.
 *
 * Costs: each segment's whole minutes at its rate, rounded once per segment (as a session's cost is rounded once), and
 * summed. A session that never changed (`rate_segments` null) costs what it always did: `total_hourly_rate` × minutes,
 * one rounding.
 */
import type { RateSegment } from '../../db/schema.ts';
import { Dec } from '../ledger/index.ts';
import { costOfMinutes, msPaidFor } from './pricing.ts';

export type { RateSegment } from '../../db/schema.ts';

/** What a session's rates by minute are read from (its row's columns). */
interface Rated {
  rate_segments: RateSegment[] | null;
  total_hourly_rate: string;
  bid: string | null;
}

const MINUTE_MS = 60_000;

/** The session's rates by minute: one segment from its first minute when its rate never changed. */
function rateSegments(s: Rated): RateSegment[] {
  return s.rate_segments ?? [{ from_minute: 0, hourly_rate: s.total_hourly_rate, bid: s.bid }];
}

/** Each segment with the minute it ends before (Infinity for the one in force). */
function spans(s: Rated) {
  const segs = rateSegments(s);
  return segs.map((seg, i) => ({
    from: seg.from_minute,
    to: segs[i + 1]?.from_minute ?? Number.POSITIVE_INFINITY,
    rate: new Dec(seg.hourly_rate),
  }));
}

/** The cost of the first `minutes` minutes of the session's clock. */
export function costOfSessionMinutes(s: Rated, minutes: number, scale: number): Dec {
  if (s.rate_segments === null) return costOfMinutes(new Dec(s.total_hourly_rate), minutes, scale);
  let cost = new Dec(0);
  for (const { from, to, rate } of spans(s)) {
    const span = Math.min(minutes, to) - from;
    if (span > 0) cost = cost.plus(costOfMinutes(rate, span, scale));
  }
  return cost;
}

/** The most whole minutes of the session's clock `funds` pay for. */
export function minutesPaidFor(s: Rated, funds: Dec, scale: number): number {
  let left = funds;
  for (const { from, to, rate } of spans(s)) {
    if (to !== Number.POSITIVE_INFINITY) {
      const whole = costOfMinutes(rate, to - from, scale);
      if (whole.lte(left)) {
        left = left.minus(whole);
        continue;
      }
    }
    return from + left.mul(60).div(rate).floor().toNumber();
  }
  return 0;
}

/** Milliseconds of the session's clock `funds` pay for (rounded up): a cap's deadline, the time a hold pays until. */
export function msPaidForSession(s: Rated, funds: Dec): number {
  let left = funds;
  for (const { from, to, rate } of spans(s)) {
    if (to !== Number.POSITIVE_INFINITY) {
      const whole = rate.mul(to - from).div(60);
      if (whole.lte(left)) {
        left = left.minus(whole);
        continue;
      }
    }
    return from * MINUTE_MS + msPaidFor(left, rate);
  }
  return 0;
}

/**
 * The segments after the rate changes to `hourlyRate` (bid `bid`) at `elapsedMs` of the session's clock (0 before it
 * starts): the minute in progress at the higher of its rate and the new one, the new rate from the next minute on;
 * neighbours at one rate merged. Null when one rate remains from the first minute.
 */
export function changedSegments(
  s: Rated,
  change: { hourlyRate: Dec; bid: string | null },
  elapsedMs: number,
): RateSegment[] | null {
  const next: RateSegment = { from_minute: 0, hourly_rate: change.hourlyRate.toFixed(), bid: change.bid };
  const current = Math.floor(elapsedMs / MINUTE_MS);
  const segs = rateSegments(s);
  const inProgress = segs.filter((seg) => seg.from_minute <= current).at(-1)!;
  const raised = change.hourlyRate.gt(inProgress.hourly_rate);
  const merged: RateSegment[] = [];
  for (const seg of [
    ...segs.filter((seg) => seg.from_minute < current),
    { ...(raised ? next : inProgress), from_minute: current },
    { ...next, from_minute: current + 1 },
  ]) {
    const last = merged.at(-1);
    if (!last || !new Dec(last.hourly_rate).eq(seg.hourly_rate)) merged.push(seg);
  }
  return merged.length === 1 ? null : merged;
}
