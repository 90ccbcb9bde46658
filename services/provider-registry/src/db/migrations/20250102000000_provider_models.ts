/**
 * One row per provider and GPU model, carrying the provider's static sort
 * keys, so discovery with a `gpu_model` term walks only the providers that
 * have a matching model, in sort order, instead of every provider.
 *
 * Why: the provider indexes order every provider, so a model term that few of
 * the first rows match (e.g. `gpu_model=a100&sort=-vram`, where machines with
 * larger non-A100 GPUs come first) visited thousands of provider rows per page.
 * Keyed by model, each matching model is an ordered index range, and a merge of
 * those ranges is the page in sort order. Only registration and full update
 * write these rows (the sort keys here never change otherwise); heartbeats do
 * not touch them. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE provider_models (
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      model text NOT NULL,
      registered_at timestamptz NOT NULL,
      max_vram bigint NOT NULL,
      gpu_count integer NOT NULL,
      PRIMARY KEY (provider_id, model)
    )`.execute(db);
  // One per sort key that never changes after registration (last_seen_at does, so that sort walks providers).
  await sql`CREATE INDEX provider_models_registered_idx ON provider_models (model, registered_at, provider_id)`.execute(
    db,
  );
  await sql`CREATE INDEX provider_models_max_vram_idx ON provider_models (model, max_vram, provider_id)`.execute(db);
  await sql`CREATE INDEX provider_models_gpu_count_idx ON provider_models (model, gpu_count, provider_id)`.execute(db);
  await sql`
    INSERT INTO provider_models (provider_id, model, registered_at, max_vram, gpu_count)
    SELECT DISTINCT p.id, lower(g.model_name), p.registered_at, p.max_vram, p.gpu_count
    FROM providers p JOIN gpus g ON g.provider_id = p.id`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE provider_models`.execute(db);
}
