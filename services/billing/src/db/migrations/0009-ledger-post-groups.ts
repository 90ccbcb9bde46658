/**
 * Billing VIII: group commit of ledger transfers. `ledger_post_groups` posts many independent groups of transfers
 * in one statement (so one commit): every row carries the index of its group; a group is all or nothing, and one
 * group's refusal leaves the others alone. It locks every touched account once, in ascending ID order (as
 * `ledger_post` does, so it never deadlocks with it), refuses unknown accounts for the whole statement (BL404),
 * then takes the groups in index order against running balances: a group with an amount that is not positive, is
 * finer than the scale or does not fit the column is refused (BL400); a group that would take a non-negative
 * account below zero, net of its own transfers and after the groups accepted before it, is refused (BL402, with the
 * account, its balance then and the group's net debit). The accepted transfers go in with one INSERT and the
 * balances change with one UPDATE. It answers one row per refused group; a group without a row was posted.
 * `ledger_post` stays for transfers that commit with other rows in a caller's transaction.
 * Frozen: written against Kysely<any>. `scale` is the token's decimals (as in 0001).
 */
import { type Kysely, type Migration, sql } from 'kysely';

export function ledgerPostGroupsMigration(scale: number): Migration {
  const s = sql.raw(String(scale));
  // Amounts of at least 10^(38 - scale) do not fit numeric(38, scale).
  const tooLarge = sql.raw(`1e${38 - scale}`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`CREATE FUNCTION ledger_post_groups(p_group int[], p_ids uuid[], p_debit uuid[], p_credit uuid[],
          p_amount numeric[], p_code text[], p_tx uuid[], p_hold uuid[], p_rev uuid[])
        RETURNS TABLE (group_index int, refusal text, message text, account_id uuid, wallet_id uuid, kind text,
                       available text, needed text)
        LANGUAGE plpgsql AS $$
        #variable_conflict use_column
        DECLARE
          v_all uuid[] := ARRAY(SELECT DISTINCT unnest(p_debit || p_credit));
          v_acc uuid[];      -- the locked accounts, ascending
          v_bal numeric[];   -- their running balances; NULL for accounts that may go negative
          v_eg int[];        -- (group, account position, net credit) entries, by group then position
          v_ep int[];
          v_en numeric[];
          v_bad_amount int[];
          r_group int[] := '{}';
          r_pos int[] := '{}';
          r_bal numeric[] := '{}';
          r_debit numeric[] := '{}';
          v_refused int[];
          i int := 1;
          j int;
          n int;
          g int;
          bad int;
        BEGIN
          SELECT coalesce(array_agg(l.id ORDER BY l.id), '{}'),
                 coalesce(array_agg(CASE WHEN l.non_negative THEN l.balance END ORDER BY l.id), '{}')
            INTO v_acc, v_bal
            FROM (SELECT a.id, a.balance, a.non_negative FROM ledger_accounts a
                   WHERE a.id = ANY(v_all) ORDER BY a.id FOR UPDATE) l;
          IF cardinality(v_acc) <> cardinality(v_all) THEN
            RAISE EXCEPTION 'unknown ledger account' USING ERRCODE = 'BL404';
          END IF;
          v_bad_amount := ARRAY(SELECT DISTINCT t.g FROM unnest(p_group, p_amount) AS t(g, x)
                                 WHERE t.x IS NULL OR t.x <= 0 OR scale(t.x) > ${s} OR t.x >= ${tooLarge});

          SELECT coalesce(array_agg(e.g ORDER BY e.g, e.pos), '{}'), coalesce(array_agg(e.pos ORDER BY e.g, e.pos), '{}'),
                 coalesce(array_agg(e.net ORDER BY e.g, e.pos), '{}')
            INTO v_eg, v_ep, v_en
            FROM (SELECT x.g, a.pos::int AS pos, sum(x.delta) AS net
                    FROM (SELECT t.g, t.acc, -t.x AS delta FROM unnest(p_group, p_debit, p_amount) AS t(g, acc, x)
                          UNION ALL
                          SELECT t.g, t.acc, t.x FROM unnest(p_group, p_credit, p_amount) AS t(g, acc, x)) x
                    JOIN unnest(v_acc, v_bal) WITH ORDINALITY AS a(id, bal, pos) ON a.id = x.acc
                   WHERE a.bal IS NOT NULL
                   GROUP BY x.g, a.pos) e;

          -- The groups in order: each sees the balances the groups accepted before it left.
          n := cardinality(v_eg);
          WHILE i <= n LOOP
            g := v_eg[i];
            j := i;
            bad := 0;
            WHILE j <= n AND v_eg[j] = g LOOP
              IF bad = 0 AND v_bal[v_ep[j]] + v_en[j] < 0 THEN
                bad := j;
              END IF;
              j := j + 1;
            END LOOP;
            IF g = ANY(v_bad_amount) THEN
              NULL;
            ELSIF bad > 0 THEN
              r_group := r_group || g;
              r_pos := r_pos || v_ep[bad];
              r_bal := r_bal || v_bal[v_ep[bad]];
              r_debit := r_debit || -v_en[bad];
            ELSE
              FOR k IN i .. j - 1 LOOP
                v_bal[v_ep[k]] := v_bal[v_ep[k]] + v_en[k];
              END LOOP;
            END IF;
            i := j;
          END LOOP;
          v_refused := v_bad_amount || r_group;

          INSERT INTO ledger_transfers
                 (id, debit_account_id, credit_account_id, amount, code, transaction_id, hold_id, reverses_transfer_id)
          SELECT t.id, t.d, t.c, t.x, t.code, t.tx, t.hold, t.rev
            FROM unnest(p_group, p_ids, p_debit, p_credit, p_amount, p_code, p_tx, p_hold, p_rev)
                 AS t(g, id, d, c, x, code, tx, hold, rev)
           WHERE t.g <> ALL(v_refused);
          UPDATE ledger_accounts a
             SET balance = a.balance + v.c - v.d, debits_total = a.debits_total + v.d,
                 credits_total = a.credits_total + v.c
            FROM (SELECT u.acc, sum(u.d) AS d, sum(u.c) AS c FROM (
                    SELECT t.acc, t.x AS d, 0::numeric AS c FROM unnest(p_group, p_debit, p_amount) AS t(g, acc, x)
                     WHERE t.g <> ALL(v_refused)
                    UNION ALL
                    SELECT t.acc, 0::numeric, t.x FROM unnest(p_group, p_credit, p_amount) AS t(g, acc, x)
                     WHERE t.g <> ALL(v_refused)) u
                  GROUP BY u.acc) v
           WHERE a.id = v.acc;

          RETURN QUERY
            SELECT b.g, 'BL400'::text,
                   'transfer amounts must be positive with at most ${s} decimals'::text,
                   NULL::uuid, NULL::uuid, NULL::text, NULL::text, NULL::text
              FROM unnest(v_bad_amount) AS b(g)
            UNION ALL
            SELECT r.g, 'BL402'::text, 'insufficient funds'::text, a.id, a.wallet_id, a.kind,
                   round(r.bal, ${s})::text, round(r.debit, ${s})::text
              FROM unnest(r_group, r_pos, r_bal, r_debit) AS r(g, pos, bal, debit)
              JOIN ledger_accounts a ON a.id = v_acc[r.pos];
        END $$`.execute(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      await sql`DROP FUNCTION IF EXISTS ledger_post_groups(int[], uuid[], uuid[], uuid[], numeric[], text[], uuid[],
        uuid[], uuid[])`.execute(db);
    },
  };
}
