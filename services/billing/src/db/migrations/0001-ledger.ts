/**
 * The ledger, wallets, holds, transaction records and idempotency keys.
 * Frozen: written against Kysely<any>; later changes are new migrations.
 * `scale` is the token's decimals, fixed here for the life of the database.
 */
import { createOutboxTable, dropOutboxTable } from '@gpu/common';
import { type Kysely, type Migration, sql } from 'kysely';
import { SYSTEM_ACCOUNT_IDS } from '../system-accounts.ts';

export { SYSTEM_ACCOUNT_IDS };

export function ledgerMigration(scale: number): Migration {
  const money = sql.raw(`numeric(38, ${scale})`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`CREATE TABLE billing_meta (key text PRIMARY KEY, value text NOT NULL)`.execute(db);
      await sql`INSERT INTO billing_meta (key, value) VALUES ('token_decimals', ${String(scale)})`.execute(db);

      await sql`CREATE TABLE wallets (
        id uuid PRIMARY KEY,
        owner_type text NOT NULL CHECK (owner_type IN ('user', 'provider')),
        owner_id uuid NOT NULL,
        solana_address text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT wallets_owner_unique UNIQUE (owner_type, owner_id)
      )`.execute(db);

      // balance = credits_total - debits_total for every account; wallet accounts never go below zero.
      await sql`CREATE TABLE ledger_accounts (
        id uuid PRIMARY KEY,
        wallet_id uuid REFERENCES wallets (id),
        kind text NOT NULL CHECK (kind IN ('available', 'locked', 'pending_out',
          'chain_incoming', 'chain_outgoing', 'platform_fees')),
        non_negative boolean NOT NULL,
        balance ${money} NOT NULL DEFAULT 0,
        debits_total ${money} NOT NULL DEFAULT 0,
        credits_total ${money} NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledger_accounts_non_negative CHECK (NOT non_negative OR balance >= 0),
        CONSTRAINT ledger_accounts_balanced CHECK (balance = credits_total - debits_total),
        CONSTRAINT ledger_accounts_wallet_kind UNIQUE (wallet_id, kind),
        CONSTRAINT ledger_accounts_wallet_kinds CHECK (
          (wallet_id IS NULL) = (kind NOT IN ('available', 'locked', 'pending_out')))
      )`.execute(db);
      for (const [kind, id] of Object.entries(SYSTEM_ACCOUNT_IDS)) {
        await sql`INSERT INTO ledger_accounts (id, kind, non_negative) VALUES (${id}, ${kind}, ${kind === 'platform_fees'})`.execute(
          db,
        );
      }

      await sql`CREATE TABLE holds (
        id uuid PRIMARY KEY,
        wallet_id uuid NOT NULL REFERENCES wallets (id),
        status text NOT NULL CHECK (status IN ('pending', 'posted', 'voided')),
        amount ${money} NOT NULL CHECK (amount > 0),
        posted ${money} NOT NULL DEFAULT 0 CHECK (posted >= 0),
        released ${money} NOT NULL DEFAULT 0 CHECK (released >= 0),
        reference text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT holds_not_overdrawn CHECK (posted + released <= amount),
        CONSTRAINT holds_closed_fully CHECK (status = 'pending' OR posted + released = amount)
      )`.execute(db);
      await sql`CREATE INDEX holds_wallet_pending ON holds (wallet_id) WHERE status = 'pending'`.execute(db);

      await sql`CREATE TABLE transactions (
        id uuid PRIMARY KEY,
        wallet_id uuid NOT NULL REFERENCES wallets (id),
        type text NOT NULL CHECK (type IN ('deposit', 'withdrawal', 'payment', 'payout', 'fee', 'lock', 'release')),
        status text NOT NULL CHECK (status IN ('pending', 'confirmed', 'failed')),
        amount ${money} NOT NULL CHECK (amount >= 0),
        fee ${money} NOT NULL DEFAULT 0 CHECK (fee >= 0),
        signature text,
        destination text,
        serialized_tx text,
        last_valid_block_height bigint,
        failure_reason text,
        hold_id uuid REFERENCES holds (id) DEFERRABLE INITIALLY DEFERRED,
        reference text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        confirmed_at timestamptz,
        CONSTRAINT transactions_signature_unique UNIQUE (signature)
      )`.execute(db);
      await sql`CREATE INDEX transactions_wallet_time ON transactions (wallet_id, created_at DESC, id DESC)`.execute(
        db,
      );
      await sql`CREATE INDEX transactions_pending_chain ON transactions (created_at)
        WHERE status = 'pending' AND type IN ('withdrawal', 'payout')`.execute(db);

      // Immutable double-entry transfers: each moves `amount` from the debit to the credit account.
      await sql`CREATE TABLE ledger_transfers (
        id uuid PRIMARY KEY,
        debit_account_id uuid NOT NULL REFERENCES ledger_accounts (id),
        credit_account_id uuid NOT NULL REFERENCES ledger_accounts (id),
        amount ${money} NOT NULL CHECK (amount > 0),
        code text NOT NULL,
        transaction_id uuid REFERENCES transactions (id) DEFERRABLE INITIALLY DEFERRED,
        hold_id uuid REFERENCES holds (id) DEFERRABLE INITIALLY DEFERRED,
        reverses_transfer_id uuid REFERENCES ledger_transfers (id),
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledger_transfers_distinct CHECK (debit_account_id <> credit_account_id)
      )`.execute(db);
      await sql`CREATE INDEX ledger_transfers_debit ON ledger_transfers (debit_account_id)`.execute(db);
      await sql`CREATE INDEX ledger_transfers_credit ON ledger_transfers (credit_account_id)`.execute(db);
      await sql`CREATE INDEX ledger_transfers_transaction ON ledger_transfers (transaction_id)`.execute(db);
      // Posts a batch of transfers atomically in one statement: locks the accounts in ID order, refuses
      // unknown accounts (BL404), amounts finer than the scale (BL400) and overdrafts (BL402, with the
      // account in DETAIL as JSON), then inserts the transfers and applies the balances.
      await sql`CREATE FUNCTION ledger_post(p_ids uuid[], p_debit uuid[], p_credit uuid[], p_amount numeric[],
          p_code text[], p_tx uuid[], p_hold uuid[], p_rev uuid[]) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
          v_accounts uuid[] := ARRAY(SELECT DISTINCT unnest(p_debit || p_credit));
          v_locked int;
          v_bad record;
        BEGIN
          SELECT count(*) INTO v_locked FROM (
            SELECT id FROM ledger_accounts WHERE id = ANY(v_accounts) ORDER BY id FOR UPDATE) l;
          IF v_locked <> cardinality(v_accounts) THEN
            RAISE EXCEPTION 'unknown ledger account' USING ERRCODE = 'BL404';
          END IF;
          IF EXISTS (SELECT 1 FROM unnest(p_amount) x WHERE x <= 0 OR scale(x) > ${sql.raw(String(scale))}) THEN
            RAISE EXCEPTION 'transfer amounts must be positive with at most ${sql.raw(String(scale))} decimals'
              USING ERRCODE = 'BL400';
          END IF;
          SELECT a.id, a.wallet_id, a.kind, a.balance, v.d - v.c AS needed INTO v_bad
            FROM ledger_accounts a
            JOIN (SELECT id, sum(d) AS d, sum(c) AS c FROM (
                    SELECT unnest(p_debit) AS id, unnest(p_amount) AS d, 0::numeric AS c
                    UNION ALL SELECT unnest(p_credit), 0::numeric, unnest(p_amount)) x GROUP BY id) v ON v.id = a.id
           WHERE a.non_negative AND a.balance + v.c - v.d < 0
           LIMIT 1;
          IF FOUND THEN
            RAISE EXCEPTION 'insufficient funds' USING ERRCODE = 'BL402', DETAIL = json_build_object(
              'account_id', v_bad.id, 'wallet_id', v_bad.wallet_id, 'kind', v_bad.kind,
              'available', v_bad.balance::text, 'needed', v_bad.needed::text)::text;
          END IF;
          INSERT INTO ledger_transfers
                 (id, debit_account_id, credit_account_id, amount, code, transaction_id, hold_id, reverses_transfer_id)
          SELECT * FROM unnest(p_ids, p_debit, p_credit, p_amount, p_code, p_tx, p_hold, p_rev);
          UPDATE ledger_accounts a
             SET balance = a.balance + v.c - v.d, debits_total = a.debits_total + v.d,
                 credits_total = a.credits_total + v.c
            FROM (SELECT id, sum(d) AS d, sum(c) AS c FROM (
                    SELECT unnest(p_debit) AS id, unnest(p_amount) AS d, 0::numeric AS c
                    UNION ALL SELECT unnest(p_credit), 0::numeric, unnest(p_amount)) x GROUP BY id) v
           WHERE a.id = v.id;
        END $$`.execute(db);
      await sql`CREATE FUNCTION ledger_transfers_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'ledger transfers are immutable: record a correcting transfer instead'; END $$`.execute(
        db,
      );
      await sql`CREATE TRIGGER ledger_transfers_no_update BEFORE UPDATE OR DELETE ON ledger_transfers
        FOR EACH ROW EXECUTE FUNCTION ledger_transfers_immutable()`.execute(db);
      await sql`CREATE TRIGGER ledger_transfers_no_truncate BEFORE TRUNCATE ON ledger_transfers
        FOR EACH STATEMENT EXECUTE FUNCTION ledger_transfers_immutable()`.execute(db);

      await sql`CREATE TABLE idempotency_keys (
        key text PRIMARY KEY,
        request_hash text NOT NULL,
        transaction_id uuid REFERENCES transactions (id),
        response_status integer,
        response_body jsonb,
        created_at timestamptz NOT NULL DEFAULT now()
      )`.execute(db);

      // Transactional outbox of events: written with the change they describe, published after commit.
      await createOutboxTable(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      await dropOutboxTable(db);
      for (const t of [
        'idempotency_keys',
        'ledger_transfers',
        'transactions',
        'holds',
        'ledger_accounts',
        'wallets',
        'billing_meta',
      ]) {
        await sql`DROP TABLE IF EXISTS ${sql.table(t)}`.execute(db);
      }
      await sql`DROP FUNCTION IF EXISTS ledger_transfers_immutable()`.execute(db);
      await sql`DROP FUNCTION IF EXISTS ledger_post(uuid[], uuid[], uuid[], numeric[], text[], uuid[], uuid[], uuid[])`.execute(
        db,
      );
    },
  };
}
