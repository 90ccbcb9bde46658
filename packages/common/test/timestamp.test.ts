/** The one schema of timestamps a caller sends: RFC 3339, written with a year from 1970 to 2099. */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { zTimestamp } from '../src/index.ts';

const body = z.object({ at: zTimestamp() });
const check = (at: string) => body.safeParse({ at });

describe('zTimestamp', () => {
  it('takes RFC 3339 date-times with Z or an offset written inside the range, edges included', () => {
    for (const at of [
      '1970-01-01T00:00:00Z',
      '2026-03-01T10:00:00.123Z',
      '2026-03-01T10:00:00+02:00',
      '2099-12-31T23:59:59.999Z',
      '2099-12-31T20:00:00-03:59',
      // The year as written is the rule (the document's pattern says it): an offset moves the instant by less than a
      // day, which PostgreSQL and every layer hold.
      '1970-01-01T00:00:00+00:01',
      '2099-12-31T20:00:00-04:00',
    ]) {
      expect(check(at).success, at).toBe(true);
    }
  });

  it('refuses year 0, year 9999 and anything outside the range, naming the field', () => {
    for (const at of [
      '0000-01-01T00:00:00Z',
      '9999-12-31T23:59:59Z',
      '1969-12-31T23:59:59.999Z',
      '2100-01-01T00:00:00Z',
      '2100-01-01T00:00:00+05:00',
      '2026-02-30T00:00:00Z',
      '2026-03-01',
      'yesterday',
    ]) {
      const r = check(at);
      expect(r.success, at).toBe(false);
      expect(
        r.error?.issues.map((i) => i.path.join('.')),
        at,
      ).toEqual(['at']);
    }
  });
});
