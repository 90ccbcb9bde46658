/**
 * A code auth would mail (an address's verification, a password's reset), put where auth keeps it: only its hash, as
 * auth does. The test rigs send no mail; the command under test is given the code as a person reads it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { insertEmailToken } from '../../../../services/auth/src/db/email-token-repository.ts';

type AuthDb = Parameters<typeof insertEmailToken>[0];

export async function mailedCode(
  db: AuthDb,
  user: { id: string; email: string },
  purpose: Parameters<typeof insertEmailToken>[1]['purpose'],
): Promise<string> {
  const code = randomBytes(32).toString('base64url');
  await insertEmailToken(db, {
    user_id: user.id,
    purpose,
    token_hash: createHash('sha256').update(code).digest('hex'),
    email: user.email,
    expires_at: new Date(Date.now() + 3_600_000),
  });
  return code;
}
