import { describe, expect, it } from 'vitest';
import { CountsByKey } from '../src/index.ts';

describe('CountsByKey', () => {
  it('counts what each key has in hand and forgets a key once it has none', () => {
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
    expect(counts.size).toBe(0);
  });

  it('holds no key past its work however many keys come and go', () => {
    const counts = new CountsByKey();
    for (let i = 0; i < 10_000; i++) {
      counts.add(`client-${i}`, 2);
      counts.remove(`client-${i}`);
      counts.remove(`client-${i}`);
    }
    expect(counts.size).toBe(0);
  });
});
