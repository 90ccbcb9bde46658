/**
 * Usage records' IDs are time-ordered UUIDs (version 7): valid UUIDs a client can keep as before, whose first 48
 * bits are the millisecond they were made, so later records' IDs sort after earlier ones; random bits drawn from a
 * pool never repeat across its refills.
 */
import { describe, expect, it } from 'vitest';
import { timeOrderedId } from '../src/domain/time-ordered-id.ts';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const millisecondOf = (id: string) => Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16);

describe('timeOrderedId', () => {
  it('makes version 7 UUIDs carrying the millisecond they were made in', () => {
    const before = Date.now();
    const id = timeOrderedId();
    const after = Date.now();
    expect(id).toMatch(V7);
    expect(millisecondOf(id)).toBeGreaterThanOrEqual(before);
    expect(millisecondOf(id)).toBeLessThanOrEqual(after);
  });

  it('sorts an ID made in a later millisecond after every earlier one', async () => {
    const earlier = Array.from({ length: 100 }, () => timeOrderedId());
    const last = millisecondOf(earlier.at(-1)!);
    while (Date.now() <= last) await new Promise((r) => setTimeout(r, 1));
    const later = timeOrderedId();
    for (const id of earlier) expect(id < later).toBe(true);
  });

  it('never repeats, across many refills of its random pool', () => {
    const ids = Array.from({ length: 20_000 }, () => timeOrderedId());
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids.slice(0, 600)) expect(id).toMatch(V7);
  });
});
