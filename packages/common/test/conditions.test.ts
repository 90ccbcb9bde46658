import { describe, expect, it } from 'vitest';
import { ifMatchHolds, sameEntityTag } from '../src/http/conditions.ts';

describe('entity tags', () => {
  it('If-Match holds for `*` or the same strong tag, never for a weak one or nothing there', () => {
    expect(ifMatchHolds('*', '"a"')).toBe(true);
    expect(ifMatchHolds('"b", "a"', '"a"')).toBe(true);
    expect(ifMatchHolds('"b"', '"a"')).toBe(false);
    expect(ifMatchHolds('W/"a"', 'W/"a"')).toBe(false);
    expect(ifMatchHolds('*', undefined)).toBe(false);
  });

  it('compares two tags with or without their quotes, strongly', () => {
    expect(sameEntityTag('"abc-2"', 'abc-2')).toBe(true);
    expect(sameEntityTag(' abc ', '"abc"')).toBe(true);
    expect(sameEntityTag('"abc"', '"abd"')).toBe(false);
    // Quotes inside a tag are its own: only the enclosing pair is dropped.
    expect(sameEntityTag('a"b', 'ab')).toBe(false);
    expect(sameEntityTag('W/"abc"', 'W/"abc"')).toBe(false);
    expect(sameEntityTag('""', '')).toBe(false);
  });
});
