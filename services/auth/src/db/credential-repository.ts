/** What the database holds about the credentials access tokens name, many at once. Takes the database or a transaction. */
import { type Kysely, sql } from 'kysely';
import type { AuthDatabase } from './schema.ts';

/** A credential a token names: its user and, for an API key's token, the key, for a sign-in's, the sign-in. */
export interface CredentialRef {
  userId: string;
  keyId?: string;
  signInId?: string;
}

/** What is known of one credential (domain/accounts/liveness.ts reads it). */
export interface CredentialFacts {
  user_exists: boolean;
  /** The user of the key named, when it exists (whoever that is). */
  key_user_id: string | null;
  key_revoked: boolean;
  /** The key was made in its user's current epoch. */
  key_current: boolean;
  /** The sign-in named is the user's and has a token not revoked, begun in the account's current epoch. */
  sign_in_alive: boolean;
}

/**
 * The facts of each credential, in the order given, in one statement whatever their number: the list travels as three
 * arrays, joined to the users and keys they name; a sign-in is looked up by its family's index.
 */
export async function credentialFacts(
  db: Kysely<AuthDatabase>,
  credentials: readonly CredentialRef[],
): Promise<CredentialFacts[]> {
  if (credentials.length === 0) return [];
  const users = credentials.map((c) => c.userId);
  const keys = credentials.map((c) => c.keyId ?? null);
  const signIns = credentials.map((c) => c.signInId ?? null);
  const { rows } = await sql<CredentialFacts>`
    SELECT u.id IS NOT NULL AS user_exists,
           k.user_id AS key_user_id,
           k.revoked_at IS NOT NULL AS key_revoked,
           COALESCE(k.epoch = u.epoch, false) AS key_current,
           c.sign_in_id IS NOT NULL AND EXISTS (
             SELECT 1 FROM refresh_tokens r
              WHERE r.family_id = c.sign_in_id
                AND r.user_id = c.user_id
                AND r.revoked_at IS NULL
                AND r.epoch = u.epoch
           ) AS sign_in_alive
      FROM unnest(${users}::uuid[], ${keys}::uuid[], ${signIns}::uuid[])
           WITH ORDINALITY AS c(user_id, key_id, sign_in_id, ord)
      LEFT JOIN users u ON u.id = c.user_id
      LEFT JOIN api_keys k ON k.id = c.key_id
     ORDER BY c.ord`.execute(db);
  return rows;
}
