/**
 * A session's rates by minute once its bid changes: each minute billed at the highest rate in force during it (a raise
 * prices the minute in progress, a cut the next one), costs exact per segment, and what funds and a cap pay for.
 */
import { describe, expect, it } from 'vitest';
import type { RateSegment } from '../src/db/schema.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import {
  changedSegments,
  costOfSessionMinutes,
  minutesPaidFor,
  msPaidForSession,
} from '../src/domain/pricing/pricing.ts';

const SCALE = 6;
const MIN = 60_000;

/** A session at `rate` (bid `bid`), changed as `changes` say: [elapsed ms, new rate]. */
function session(rate: string, changes: [number, string][] = []) {
  let s = { total_hourly_rate: rate, bid: rate, rate_segments: null as RateSegment[] | null };
  for (const [at, next] of changes) {
    const segments = changedSegments(s, { hourlyRate: new Dec(next), bid: next }, at);
    s = { total_hourly_rate: next, bid: next, rate_segments: segments };
  }
  return s;
}

const cost = (s: ReturnType<typeof session>, minutes: number) => costOfSessionMinutes(s, minutes, SCALE).toFixed();

describe('rates by minute', () => {
  it('bills a raise from the minute in progress and a cut from the next minute', () => {
    const raised = session('2', [[10.5 * MIN, '6']]);
    expect(raised.rate_segments).toEqual([
      { from_minute: 0, hourly_rate: '2', bid: '2' },
      { from_minute: 10, hourly_rate: '6', bid: '6' },
    ]);
    // 10 minutes at 2 an hour, the 11th at 6.
    expect(cost(raised, 11)).toBe(new Dec(2).mul(10).div(60).toDecimalPlaces(6).plus(0.1).toFixed());
    expect(cost(raised, 5)).toBe(new Dec(2).mul(5).div(60).toDecimalPlaces(6).toFixed());

    const cut = session('6', [[5.5 * MIN, '2']]);
    expect(cut.rate_segments).toEqual([
      { from_minute: 0, hourly_rate: '6', bid: '6' },
      { from_minute: 6, hourly_rate: '2', bid: '2' },
    ]);
    // Six minutes at 6 (the one of the cut included), then 2 an hour.
    expect(cost(cut, 8)).toBe('0.666667');
  });

  it('bills every minute at the highest bid in force during it, however the changes are timed', () => {
    // Raised for most of each minute and cut just before each minute's end: every minute still pays the raise.
    const changes: [number, string][] = [];
    for (let m = 0; m < 5; m++) {
      changes.push([m * MIN + 1_000, '10'], [m * MIN + 59_000, '1']);
    }
    const s = session('1', changes);
    expect(cost(s, 5)).toBe(costOfSessionMinutes(session('10'), 5, SCALE).toFixed());
    // From the sixth minute on, the cut holds.
    expect(new Dec(cost(s, 6)).minus(cost(s, 5)).toFixed()).toBe(new Dec(1).div(60).toDecimalPlaces(6).toFixed());
    // Changes within one minute: the minute at the highest of them, the next at the last.
    const within = session('3', [
      [2 * MIN + 1_000, '1'],
      [2 * MIN + 2_000, '5'],
      [2 * MIN + 3_000, '2'],
    ]);
    expect(within.rate_segments).toEqual([
      { from_minute: 0, hourly_rate: '3', bid: '3' },
      { from_minute: 2, hourly_rate: '5', bid: '5' },
      { from_minute: 3, hourly_rate: '2', bid: '2' },
    ]);
    // Back to where it was: one rate again.
    expect(session('3', [[0, '3']]).rate_segments).toBeNull();
  });

  it('treats a change before the clock starts as one at its first moment', () => {
    // A raise is the only rate; a cut still pays its first minute at the old bid (the clock may start a little
    // before it is reported, while the old bid held the GPUs).
    const raised = session('2', [[0, '8']]);
    expect(raised.rate_segments).toBeNull();
    expect(cost(raised, 3)).toBe('0.4');
    const cut = session('8', [[0, '2']]);
    expect(cut.rate_segments).toEqual([
      { from_minute: 0, hourly_rate: '8', bid: '8' },
      { from_minute: 1, hourly_rate: '2', bid: '2' },
    ]);
    expect(cost(cut, 3)).toBe('0.2');
  });

  it('says what funds pay for across segments, in whole minutes and to the millisecond', () => {
    const s = session('6', [[5.5 * MIN, '2']]);
    // 0.6 pays the six minutes at 6; 0.1 more pays 3 minutes at 2.
    expect(minutesPaidFor(s, new Dec('0.7'), SCALE)).toBe(9);
    expect(minutesPaidFor(s, new Dec('0.3'), SCALE)).toBe(3);
    expect(msPaidForSession(s, new Dec('0.7'))).toBe(9 * MIN);
    expect(msPaidForSession(s, new Dec('0.05'))).toBe(30_000);
    // Unchanged sessions: as before.
    expect(minutesPaidFor(session('6'), new Dec('0.7'), SCALE)).toBe(7);
    expect(msPaidForSession(session('6'), new Dec('0.7'))).toBe(7 * MIN);
  });
});
