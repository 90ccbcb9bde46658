/**
 * Each GPU's static description as the opening of its API JSON
 * (`{"model_name":…,"power_consumption":…`, no closing brace), rendered once
 * when the GPU is written instead of on every discovery page: a page of 100
 * providers renders ~400 GPUs, and their nine static fields were about a third
 * of the list statement's time. Discovery appends the live metrics (written by
 * heartbeats) and the closing brace. A trigger keeps the text in step with the
 * columns it renders, whoever writes them; heartbeats, which write only the
 * metrics, do not fire it. The text is what `JSON.stringify` writes for the
 * same fields (to_json escapes strings; the numbers are integers).
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE gpus ADD COLUMN spec_json text`.execute(db);
  await sql`
    CREATE FUNCTION gpu_spec_json() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      NEW.spec_json := concat(
        '{"model_name":', coalesce(to_json(NEW.model_name)::text, 'null'),
        ',"vram":', coalesce(NEW.vram::text, 'null'),
        ',"driver_version":', coalesce(to_json(NEW.driver_version)::text, 'null'),
        ',"architecture":', coalesce(to_json(NEW.architecture)::text, 'null'),
        ',"compute_capability":', coalesce(to_json(NEW.compute_capability)::text, 'null'),
        ',"cuda_cores":', coalesce(NEW.cuda_cores::text, 'null'),
        ',"tensor_cores":', coalesce(NEW.tensor_cores::text, 'null'),
        ',"memory_bandwidth":', coalesce(NEW.memory_bandwidth::text, 'null'),
        ',"power_consumption":', coalesce(NEW.power_consumption::text, 'null'));
      RETURN NEW;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER gpus_spec_json
    BEFORE INSERT OR UPDATE OF model_name, vram, driver_version, architecture, compute_capability, cuda_cores,
      tensor_cores, memory_bandwidth, power_consumption, spec_json
    ON gpus FOR EACH ROW EXECUTE FUNCTION gpu_spec_json()`.execute(db);
  // Existing GPUs: an update of a rendered column fires the trigger.
  await sql`UPDATE gpus SET model_name = model_name`.execute(db);
  await sql`ALTER TABLE gpus ALTER COLUMN spec_json SET NOT NULL`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER gpus_spec_json ON gpus`.execute(db);
  await sql`DROP FUNCTION gpu_spec_json()`.execute(db);
  await sql`ALTER TABLE gpus DROP COLUMN spec_json`.execute(db);
}
