/**
 * Discovery's model and architecture filters fold ASCII capitals only, in the service and in the database alike
 * (`domain/case-fold.ts`): before, the service lower-cased with Unicode's rules and the database with its locale's, so
 * a name with a capital outside ASCII was found by one sort and not another. The machines whose GPU names or
 * architectures hold a character outside ASCII get their summaries (`gpu_models`, `gpu_architectures`) and model keys
 * (`provider_models`) written again by the new rule; every other machine's are the same under both. Frozen: Kysely<any>
 * and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  const fold = (expr: string) =>
    sql.raw(`translate(${expr}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')`);
  await sql`
    CREATE TEMP TABLE refolded AS
    SELECT DISTINCT provider_id FROM gpus
    WHERE octet_length(model_name) <> char_length(model_name)
      OR octet_length(coalesce(architecture, '')) <> char_length(coalesce(architecture, ''))`.execute(db);
  await sql`
    UPDATE providers p SET
      gpu_models = '|' || coalesce((
        SELECT string_agg(DISTINCT ${fold('g.model_name')}, '|') FROM gpus g WHERE g.provider_id = p.id), '') || '|',
      gpu_architectures = '|' || coalesce((
        SELECT string_agg(DISTINCT ${fold('g.architecture')}, '|') FROM gpus g
        WHERE g.provider_id = p.id AND coalesce(g.architecture, '') <> ''), '') || '|'
    WHERE p.id IN (SELECT provider_id FROM refolded)`.execute(db);
  await sql`DELETE FROM provider_models WHERE provider_id IN (SELECT provider_id FROM refolded)`.execute(db);
  await sql`
    INSERT INTO provider_models (provider_id, model, registered_at, max_vram, gpu_count)
    SELECT DISTINCT p.id, ${fold('g.model_name')}, p.registered_at, p.max_vram, p.gpu_count
    FROM providers p JOIN gpus g ON g.provider_id = p.id
    WHERE p.id IN (SELECT provider_id FROM refolded)`.execute(db);
  await sql`DROP TABLE refolded`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(_db: Kysely<any>): Promise<void> {
  // Nothing to undo: the summaries are as good a search by the earlier rule for every name in ASCII.
}
