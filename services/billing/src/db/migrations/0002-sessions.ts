/**
 * Billing II: provider-specific rates, rental sessions, their usage records
 * and billing records. Frozen: written against Kysely<any>; later changes are
 * new migrations. `scale` is the token's decimals (as in 0001). Rates are
 * unbounded NUMERIC (exact, never rounded); token amounts have the scale.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export function sessionsMigration(scale: number): Migration {
  const money = sql.raw(`numeric(38, ${scale})`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`CREATE TABLE provider_rates (
        provider_id uuid PRIMARY KEY,
        base_rates jsonb NOT NULL,
        vram_rate_per_gb_hour numeric CHECK (vram_rate_per_gb_hour >= 0),
        power_rate_per_watt_hour numeric CHECK (power_rate_per_watt_hour >= 0),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`.execute(db);

      await sql`CREATE TABLE rental_sessions (
        id uuid PRIMARY KEY,
        user_id uuid NOT NULL,
        wallet_id uuid NOT NULL REFERENCES wallets (id),
        provider_id uuid NOT NULL,
        provider_wallet_id uuid NOT NULL REFERENCES wallets (id),
        job_id text NOT NULL,
        gpu_model text NOT NULL,
        gpu_count integer NOT NULL CHECK (gpu_count > 0),
        requested_vram_mb integer NOT NULL CHECK (requested_vram_mb >= 0),
        estimated_power_w integer NOT NULL CHECK (estimated_power_w >= 0),
        actual_power_w numeric,
        rate_key text NOT NULL,
        rate_source text NOT NULL,
        base_rate_per_gpu numeric NOT NULL,
        base_hourly_rate numeric NOT NULL,
        vram_hourly_rate numeric NOT NULL,
        power_hourly_rate numeric NOT NULL,
        demand_multiplier numeric NOT NULL,
        supply_factor numeric NOT NULL,
        total_hourly_rate numeric NOT NULL CHECK (total_hourly_rate > 0),
        platform_fee_percent numeric NOT NULL,
        status text NOT NULL CHECK (status IN ('active', 'grace_period', 'completed', 'terminated')),
        hold_id uuid NOT NULL REFERENCES holds (id),
        lock_transaction_id uuid REFERENCES transactions (id),
        billed_minutes integer NOT NULL DEFAULT 0 CHECK (billed_minutes >= 0),
        total_cost ${money} NOT NULL DEFAULT 0 CHECK (total_cost >= 0),
        started_at timestamptz NOT NULL,
        last_usage_at timestamptz,
        grace_until timestamptz,
        ended_at timestamptz,
        end_reason text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`.execute(db);
      // One running session per job.
      await sql`CREATE UNIQUE INDEX rental_sessions_running_job ON rental_sessions (job_id)
        WHERE status IN ('active', 'grace_period')`.execute(db);
      await sql`CREATE INDEX rental_sessions_running ON rental_sessions (started_at)
        WHERE status IN ('active', 'grace_period')`.execute(db);
      await sql`CREATE INDEX rental_sessions_wallet ON rental_sessions (wallet_id)`.execute(db);

      await sql`CREATE TABLE usage_records (
        id uuid PRIMARY KEY,
        session_id uuid NOT NULL REFERENCES rental_sessions (id),
        message_id text NOT NULL,
        reported_at timestamptz NOT NULL,
        gpu_utilization numeric NOT NULL,
        power_draw_w numeric NOT NULL,
        metrics jsonb,
        billed_minutes integer NOT NULL,
        cost ${money} NOT NULL CHECK (cost >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT usage_records_message_unique UNIQUE (session_id, message_id)
      )`.execute(db);

      await sql`CREATE TABLE billing_records (
        id uuid PRIMARY KEY,
        session_id uuid NOT NULL UNIQUE REFERENCES rental_sessions (id),
        user_id uuid NOT NULL,
        wallet_id uuid NOT NULL REFERENCES wallets (id),
        provider_id uuid NOT NULL,
        provider_wallet_id uuid NOT NULL REFERENCES wallets (id),
        job_id text NOT NULL,
        gpu_model text NOT NULL,
        gpu_count integer NOT NULL,
        status text NOT NULL CHECK (status IN ('completed', 'terminated')),
        end_reason text,
        total_hourly_rate numeric NOT NULL,
        billed_minutes integer NOT NULL,
        total_cost ${money} NOT NULL CHECK (total_cost >= 0),
        platform_fee ${money} NOT NULL CHECK (platform_fee >= 0),
        provider_earnings ${money} NOT NULL CHECK (provider_earnings >= 0),
        payment_transaction_id uuid REFERENCES transactions (id),
        started_at timestamptz NOT NULL,
        ended_at timestamptz NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT billing_records_split CHECK (platform_fee + provider_earnings = total_cost)
      )`.execute(db);
      await sql`CREATE INDEX billing_records_time ON billing_records (ended_at DESC, id DESC)`.execute(db);
      await sql`CREATE INDEX billing_records_user ON billing_records (user_id, ended_at DESC)`.execute(db);
      await sql`CREATE INDEX billing_records_provider ON billing_records (provider_id, ended_at DESC)`.execute(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      for (const t of ['billing_records', 'usage_records', 'rental_sessions', 'provider_rates']) {
        await sql`DROP TABLE IF EXISTS ${sql.table(t)}`.execute(db);
      }
    },
  };
}
