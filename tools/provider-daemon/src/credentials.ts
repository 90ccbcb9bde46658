/**
 * The daemon client's ID and secret: from the configuration (`credentials.client_id` / `client_secret`), or from a
 * JSON file (`credentials.file`). The file is what the auth service answers when the provider creates (or rotates)
 * the daemon's client, saved as it is:
 *
 *   curl -s -X POST -H "Authorization: Bearer $PROVIDER_TOKEN" -H 'content-type: application/json' \
 *     -d '{"name":"rig-1","role":"daemon"}' http://127.0.0.1:8000/api/v1/auth/clients > credentials.json
 *
 * (`{client_id, client_secret, client: {...}}`; the files auth writes for its platform clients have the same two
 * fields). An answer saved from an auth service older than its top-level `client_id` names the ID as `client.id`,
 * which is read too. Other fields are ignored.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { DaemonConfig } from './config.ts';

export interface DaemonCredentials {
  clientId: string;
  clientSecret: string;
}

const credentialsFileSchema = z.object({
  client_id: z.string().min(1).optional(),
  client_secret: z.string().min(1),
  client: z.object({ id: z.string().min(1) }).optional(),
});

/** The daemon's credentials; an Error saying what is missing and where when there are none. */
export function loadCredentials(config: Pick<DaemonConfig, 'credentials'>): DaemonCredentials {
  const { client_id: clientId, client_secret: clientSecret, file } = config.credentials;
  if (!file) {
    if (clientId && clientSecret) return { clientId, clientSecret };
    throw new Error('no credentials: set credentials.client_id and client_secret, or credentials.file');
  }
  let body: unknown;
  try {
    body = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read the credentials file ${file}: ${(err as Error).message}`);
  }
  const parsed = credentialsFileSchema.safeParse(body);
  const id = parsed.success ? (parsed.data.client_id ?? parsed.data.client?.id) : undefined;
  if (!parsed.success || !id) {
    throw new Error(
      `the credentials file ${file} has no client_id and client_secret: save the auth service's answer to ` +
        'POST /api/v1/auth/clients (role daemon) as it is',
    );
  }
  return { clientId: id, clientSecret: parsed.data.client_secret };
}
