/** Queries on the published signing keys (public halves only). */
import type { Kysely } from 'kysely';
import type { AuthDatabase } from './schema.ts';

export interface PublishedKey {
  kid: string;
  alg: string;
  publicJwk: Record<string, unknown>;
  retiredAt: Date | null;
}

/**
 * Makes `kid` the active key: inserts it when new (or un-retires it) and retires
 * every other active key now. Run in a transaction so two instances agree.
 */
export async function activateKey(
  db: Kysely<AuthDatabase>,
  key: { kid: string; alg: string; publicJwk: Record<string, unknown> },
  at: Date = new Date(),
): Promise<void> {
  await db
    .insertInto('signing_keys')
    .values({ kid: key.kid, alg: key.alg, public_jwk: JSON.stringify(key.publicJwk) })
    .onConflict((oc) => oc.column('kid').doUpdateSet({ retired_at: null }))
    .execute();
  await db
    .updateTable('signing_keys')
    .set({ retired_at: at })
    .where('kid', '!=', key.kid)
    .where('retired_at', 'is', null)
    .execute();
}

/** Active keys and keys retired after `retiredAfter` (whose tokens may still be valid). */
export async function publishedKeys(db: Kysely<AuthDatabase>, retiredAfter: Date): Promise<PublishedKey[]> {
  const rows = await db
    .selectFrom('signing_keys')
    .selectAll()
    .where((eb) => eb.or([eb('retired_at', 'is', null), eb('retired_at', '>', retiredAfter)]))
    .orderBy('created_at', 'desc')
    .execute();
  return rows.map((r) => ({ kid: r.kid, alg: r.alg, publicJwk: r.public_jwk, retiredAt: r.retired_at }));
}
