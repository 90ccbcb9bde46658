import { describe, expect, it } from 'vitest';
import { CountsByKey } from '../src/index.ts';

/** The keys the counts remember, those at zero not yet forgotten included (what their memory holds). */
const remembered = (counts: CountsByKey) => (counts as unknown as { tallies: Map<string, unknown> }).tallies.size;

describe('CountsByKey', () => {
  it('counts what each key has in hand', () => {
    const counts = new CountsByKey();
    expect(counts.of('a')).toBe(0);
    counts.add('a');
    counts.add('a', 3);
    counts.add('b', 2);
    expect([counts.of('a'), counts.of('b'), counts.size]).toEqual([4, 2, 2]);
    counts.remove('a', 3);
    counts.remove('b', 2);
    expect([counts.of('a'), counts.of('b'), counts.size]).toEqual([1, 0, 1]);
    counts.remove('a');
    counts.remove('a');
    expect([counts.of('a'), counts.size]).toEqual([0, 0]);
  });

  it('adds and removes through the tally an add answered, as through the key', () => {
    const counts = new CountsByKey();
    const tally = counts.tally('a');
    expect(tally.n).toBe(0);
    const held = counts.add(tally, 2);
    counts.add('a');
    expect([held.n, counts.of('a')]).toEqual([3, 3]);
    counts.remove(held, 2);
    expect(counts.of('a')).toBe(1);
  });

  it('holds about the keys with work in hand however many come and go', () => {
    const counts = new CountsByKey();
    counts.add('kept', 5);
    for (let i = 0; i < 10_000; i++) {
      const held = counts.add(`client-${i}`, 2);
      counts.remove(held);
      counts.remove(`client-${i}`);
    }
    expect([counts.size, counts.of('kept')]).toEqual([1, 5]);
    expect(remembered(counts)).toBeLessThanOrEqual(1 + 1_024);
  });

  it('holds no more than that of keys only looked up (senders refused before they had any in hand)', () => {
    const counts = new CountsByKey();
    const held = counts.add('kept', 2);
    for (let i = 0; i < 10_000; i++) expect(counts.tally(`refused-${i}`).n).toBe(0);
    expect(remembered(counts)).toBeLessThanOrEqual(1 + 1_024 + 1);
    expect([counts.size, counts.of('kept')]).toEqual([1, 2]);
    counts.remove(held, 2);
    expect(counts.size).toBe(0);
  });

  it('counts a key again after its tally at zero was forgotten', () => {
    const counts = new CountsByKey();
    const stale = counts.add('a');
    counts.remove(stale);
    // Enough keys at zero for a sweep, which forgets `a` too.
    for (let i = 0; i < 2_000; i++) counts.remove(counts.add(`client-${i}`));
    const held = counts.add(stale, 2);
    expect([counts.of('a'), counts.size]).toEqual([2, 1]);
    counts.remove(held, 2);
    expect([counts.of('a'), counts.size]).toEqual([0, 0]);
  });
});
