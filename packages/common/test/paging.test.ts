import { describe, expect, it } from 'vitest';
import { afterCursor, cursorPosition, encodeCursor, isUuid, positionCursor } from '../src/paging.ts';

const id = '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9f';

describe('keyset positions in cursors', () => {
  it('reads back the position a service wrote (UTC, microseconds or milliseconds)', () => {
    for (const at of ['2026-11-23T10:00:00.123456Z', '2026-11-23T10:00:00.123Z']) {
      const position = { at, id };
      expect(cursorPosition(positionCursor(position))).toEqual(position);
    }
  });

  it.each([
    ['a year-0 time', ['0000-01-01T00:00:00.000000Z', id]],
    ['a time past 2099', ['9999-12-31T00:00:00Z', id]],
    ['a free-form date', ['Tue 2020', id]],
    ['February 30', ['2026-02-30T00:00:00.000000Z', id]],
    ['an offset past what PostgreSQL reads (+20:00: a 500 there)', ['2026-01-01T00:00:00.000000+20:00', id]],
    ['a time with an offset, though a valid one', ['2026-11-23T10:00:00.000000+01:00', id]],
    ['an ID of 36 dashes', ['2026-11-23T10:00:00.000000Z', '-'.repeat(36)]],
    ['an ID that is not a UUID', ['2026-11-23T10:00:00.000000Z', 'not-a-uuid']],
  ])('refuses a forged cursor with %s (400 INVALID_CURSOR, never SQL)', (_, values) => {
    const text = encodeCursor(values);
    expect(cursorPosition(text)).toBeUndefined();
    expect(() => afterCursor(text)).toThrow(expect.objectContaining({ code: 'INVALID_CURSOR' }));
  });
});

describe('isUuid', () => {
  it.each([
    ['lower case', id, true],
    ['upper case (PostgreSQL reads either)', id.toUpperCase(), true],
    ['the nil UUID', '00000000-0000-0000-0000-000000000000', true],
    ['36 dashes', '-'.repeat(36), false],
    ['a dash out of place', '0b8e7c1e4-f6a-4c4e-9d8b-2f1a3c5d7e9f', false],
    ['a letter past f', '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9g', false],
    ['a character just past 9, F or f', '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9:', false],
    ['one digit short', id.slice(1), false],
    ['one digit more', `${id}0`, false],
    ['braces', `{${id.slice(1, -1)}}`, false],
    ['empty', '', false],
  ])('%s: %s', (_, value, expected) => {
    expect(isUuid(value)).toBe(expected);
  });
});
