/**
 * Browsers' port links and cookies once expired (domain/reach/port-grants.ts): one background round forgets every
 * one of them, however many piled up since the last, and none that still holds.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { purgeExpiredGrants } from '../src/domain/reach/index.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

/** `n` grants of one session's port, expiring at `expires` (the SQL expression). */
const grants = (n: number, expires: string) =>
  sql`INSERT INTO port_grants (secret_hash, kind, session_id, port, user_id, expires_at, created_at)
      SELECT sha256(convert_to(gen_random_uuid()::text, 'UTF8')), 'ticket', gen_random_uuid(), 8888, gen_random_uuid(),
             ${sql.raw(expires)}, now() - interval '2 hours'
      FROM generate_series(1, ${n})`.execute(h.db);

describe('expired port grants', () => {
  it('are all forgotten in one round, 2,500 of them; those that hold stay', async () => {
    await grants(2500, "now() - interval '1 hour'");
    await grants(5, "now() + interval '1 hour'");
    expect(await purgeExpiredGrants(h.ctx)).toBe(2500);
    const left = await h.db
      .selectFrom('port_grants')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirst();
    expect(Number(left?.n)).toBe(5);
  });
});
