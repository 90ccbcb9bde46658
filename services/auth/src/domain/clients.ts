/**
 * Machine clients (OAuth 2.0 client credentials, RFC 6749 §4.4): who may
 * manage them, how a client proves itself, and the clients the platform
 * creates for itself at start-up.
 *
 * - Admins create, list, rotate and revoke every client.
 * - A provider manages the `daemon` clients that act for themselves (a daemon
 *   on each of their machines); another user's clients answer 404.
 * - A name is unique among its owner's active clients (a platform client's,
 *   which has no owner, among the platform's): two providers may name a
 *   daemon alike, and nothing tells one provider another's names. Tokens and
 *   the grant name a client by its ID, never by its name.
 * - A client authenticates with its ID and secret; after a rotation the old
 *   secret keeps working for the grace period, so running instances can be
 *   restarted with the new one. A revoked client gets no new token; tokens
 *   already issued live out their short lifetime (the access-token expiry).
 * - A daemon's token carries `owner_id`, the provider owner it acts for; it is
 *   refused once that user no longer holds the provider role, or once the
 *   owner's account started afresh (accounts/epochs.ts: it is revoked then).
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  afterCursor,
  type ClientRole,
  durationMs,
  isClientRole,
  isPrivileged,
  keysetPage,
  type Principal,
} from '@gpu/common';
import {
  type ClientRow,
  findActivePlatformClient,
  findClient,
  insertClient,
  listClients as listClientRows,
  lockBootstrapClients,
  revokeClient as revokeClientRow,
  rotateSecret,
  touchClient,
} from '../db/client-repository.ts';
import { findUserById, isUniqueViolation } from '../db/user-repository.ts';
import { authErrors } from '../errors.ts';
import { epochOf } from './accounts/index.ts';
import { audit, auditedChange, type RecordAudit } from './audit.ts';
import { generateSecret, hashSecret, secretMatches } from './client-secret.ts';
import type { AuthContext } from './context.ts';
import { issueClientToken } from './token-pair.ts';

/** A machine client as stored (its secret hashes included: never shown). */
export type Client = ClientRow;

export interface NewClient {
  name: string;
  role: ClientRole;
  /** A daemon's provider owner; a provider creating a daemon may leave it out (themselves). */
  owner_id?: string;
}

/** A client with the secret it was just given (shown once). */
export interface ClientWithSecret {
  client: Client;
  secret: string;
}

const isAdmin = (actor: Principal) => isPrivileged(actor);

/** The client if the actor may manage it; 404 otherwise (another provider's client does not exist for them). */
async function manageable(ctx: AuthContext, actor: Principal, id: string): Promise<ClientRow> {
  const client = await findClient(ctx.db, id);
  if (!client || (!isAdmin(actor) && client.owner_id !== actor.subject)) throw authErrors.clientNotFound(id);
  return client;
}

/** A change to a client, in the audit trail (`client_created`, `client_rotated`, ...), in the change's transaction. */
function auditClient(record: RecordAudit, actor: Principal | null, action: string, client: ClientRow, extra = {}) {
  return record(
    {
      action: `client_${action}`,
      actor,
      target: `client:${client.id}`,
      details: { client_name: client.name, role: client.role, ...extra },
    },
    `client ${action}`,
    // A client revoked stays revoked, whether or not its event could be appended.
    { revocation: action === 'revoked' },
  );
}

export async function createClient(ctx: AuthContext, actor: Principal, input: NewClient): Promise<ClientWithSecret> {
  let ownerId = input.owner_id ?? null;
  if (!isAdmin(actor)) {
    // A provider makes daemons for themselves only.
    if (input.role !== 'daemon' || (ownerId !== null && ownerId !== actor.subject)) throw authErrors.notYourClient();
    ownerId = actor.subject;
  }
  // A daemon records its owner's epoch (the creating sign-in's): it dies when the owner's account starts afresh.
  let ownerEpoch: number | undefined;
  if (input.role === 'daemon') {
    if (ownerId === null) throw authErrors.ownerRequired();
    const owner = await findUserById(ctx.db, ownerId);
    if (!owner) throw authErrors.userNotFound(ownerId);
    if (!owner.roles.includes('provider')) throw authErrors.ownerNotProvider(ownerId);
    ownerEpoch = await epochOf(ctx, actor, ownerId);
  } else if (ownerId !== null) {
    throw authErrors.ownerOnlyForDaemons();
  }
  const secret = generateSecret();
  try {
    const client = await auditedChange(ctx, async (trx, record) => {
      const made = await insertClient(trx, {
        name: input.name,
        role: input.role,
        owner_id: ownerId,
        secret_hash: hashSecret(secret),
        created_by: actor.unchecked ? null : actor.subject,
        ...(ownerEpoch === undefined ? {} : { owner_epoch: ownerEpoch }),
      });
      await auditClient(record, actor, 'created', made, { owner_id: ownerId });
      return made;
    });
    return { client, secret };
  } catch (err) {
    // Names are unique among the owner's active clients (a platform client's among the platform's).
    if (isUniqueViolation(err)) throw authErrors.clientNameTaken(input.name, ownerId);
    throw err;
  }
}

export interface ClientPage {
  clients: Client[];
  nextCursor: string | null;
}

/** Admins see every client, providers their own daemons; oldest first, keyset-paged (common's keyset position). */
export async function listClients(
  ctx: AuthContext,
  actor: Principal,
  query: { limit: number; cursor?: string; include_revoked: boolean },
): Promise<ClientPage> {
  const rows = await listClientRows(ctx.db, {
    ownerId: isAdmin(actor) ? undefined : actor.subject,
    includeRevoked: query.include_revoked,
    limit: query.limit + 1,
    after: afterCursor(query.cursor),
  });
  const page = keysetPage(rows, query.limit);
  return { clients: page.items, nextCursor: page.nextCursor };
}

export const getClient = manageable;

/** A new secret; the previous one stays valid for `graceMs` (default: the configured rotation grace). */
export async function rotateClient(
  ctx: AuthContext,
  actor: Principal,
  id: string,
  graceMs = durationMs(ctx.config.clients.rotation_grace),
): Promise<ClientWithSecret> {
  await manageable(ctx, actor, id);
  const secret = generateSecret();
  const client = await auditedChange(ctx, async (trx, record) => {
    const rotated = await rotateSecret(trx, id, hashSecret(secret), new Date(Date.now() + graceMs));
    if (!rotated) throw authErrors.clientRevoked(id);
    await auditClient(record, actor, 'rotated', rotated, { previous_secret_valid_ms: graceMs });
    return rotated;
  });
  return { client, secret };
}

export async function revokeClient(ctx: AuthContext, actor: Principal, id: string): Promise<ClientRow> {
  const before = await manageable(ctx, actor, id);
  // Revoked once: only the request that revoked it records it.
  const revoked = await auditedChange(ctx, async (trx, record) => {
    const row = await revokeClientRow(trx, id);
    if (row) await auditClient(record, actor, 'revoked', row);
    return row;
  });
  return revoked ?? (await findClient(ctx.db, id)) ?? before;
}

/** Whether the secret is the client's current one, or its previous one within the grace period. */
function secretValid(client: ClientRow, secret: string, now: Date): boolean {
  if (secretMatches(secret, client.secret_hash)) return true;
  const until = client.previous_secret_expires_at;
  return until !== null && new Date(until) > now && secretMatches(secret, client.previous_secret_hash);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The client-credentials grant: an access token for a client that proves its secret. Failures are one answer
 * (401 invalid_client) whatever failed, rate-limited per client IP, and failures per client and address.
 */
export async function grantClientToken(
  ctx: AuthContext,
  credentials: { clientId: string; secret: string },
  clientIp: string,
): Promise<{ token: string; expiresIn: number }> {
  const limits = ctx.config.rate_limit;
  const clientKey = credentials.clientId.toLowerCase();
  // Failures count per client and address: a client's ID is in every token it gets (and a daemon's in the registry),
  // so a count per client alone would let anyone who saw one lock its program out (as API keys, api-keys.ts).
  const failures = `${clientKey}:${clientIp}`;
  await ctx.limiter.consume(limits.token_per_ip, 'token-ip', clientIp);
  await ctx.limiter.check(limits.token_failures_per_client, 'token-client', failures);
  const client = UUID.test(clientKey) ? await findClient(ctx.db, clientKey) : undefined;
  const now = new Date();
  let refusal: string | undefined;
  if (!client) refusal = 'unknown client';
  else if (client.revoked_at) refusal = 'revoked';
  else if (!secretValid(client, credentials.secret, now)) refusal = 'wrong secret';
  else refusal = await daemonOwnerRefusal(ctx, client);
  if (!client || refusal) {
    await ctx.limiter.hit(limits.token_failures_per_client, 'token-client', failures);
    await audit(
      ctx,
      {
        action: 'client_token_refused',
        outcome: 'refused',
        target: `client:${credentials.clientId}`,
        details: { reason: refusal },
        address: clientIp,
      },
      'client credentials refused',
    );
    throw authErrors.invalidClient();
  }
  const issued = await issueClientToken(ctx, client);
  touchClient(ctx.db, client.id).catch((err) => ctx.logger.warn({ err }, 'recording client use failed'));
  ctx.logger.info(
    { audit: true, action: 'token_issued', client_id: client.id, role: client.role, ip: clientIp },
    'client token issued',
  );
  return issued;
}

/**
 * Why a daemon client may no longer act for its owner (the owner no longer a provider, or their account started
 * afresh); undefined for a client that may, and for any other role.
 */
async function daemonOwnerRefusal(ctx: AuthContext, client: ClientRow): Promise<string | undefined> {
  if (client.role !== 'daemon') return undefined;
  const owner = client.owner_id ? await findUserById(ctx.db, client.owner_id) : undefined;
  if (!owner?.roles.includes('provider')) return 'owner is no longer a provider';
  if (owner.epoch !== client.owner_epoch) return "owner's account started afresh";
  return undefined;
}

/**
 * Why the client `id` may no longer act (revoked, unknown, or a daemon whose owner may no longer be served), as the
 * client-credentials grant judges it; undefined while it may. A client's access token outlives its revocation by its
 * short lifetime: what a client is given for longer asks this first.
 */
export async function clientRefusal(ctx: AuthContext, id: string): Promise<string | undefined> {
  const client = UUID.test(id) ? await findClient(ctx.db, id) : undefined;
  if (!client) return 'unknown client';
  if (client.revoked_at) return 'revoked';
  return daemonOwnerRefusal(ctx, client);
}

/** What a bootstrap entry names: `name:role`. */
function parseBootstrap(entry: string): { name: string; role: ClientRole } {
  const [name = '', role = ''] = entry.split(':').map((s) => s.trim());
  if (!name || !isClientRole(role) || role === 'daemon') {
    throw new Error(`clients.bootstrap entry "${entry}" must be name:role with role service, gateway or scheduler`);
  }
  return { name, role };
}

/**
 * Creates the clients the platform needs (`clients.bootstrap`) and writes each new secret to
 * `<clients.secrets_dir>/<name>.json` (mode 0600) for the service that uses it. A client whose secret file is
 * gone gets a new secret. Instances starting together serialise on an advisory lock.
 */
export async function ensureBootstrapClients(ctx: AuthContext): Promise<string[]> {
  const { bootstrap, secrets_dir: dir } = ctx.config.clients;
  if (bootstrap.length === 0) return [];
  if (!dir) throw new Error('clients.bootstrap needs clients.secrets_dir: where the secrets are written');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const written: string[] = [];
  for (const { name, role } of bootstrap.map(parseBootstrap)) {
    const file = path.join(dir, `${name}.json`);
    await auditedChange(ctx, async (trx, record) => {
      await lockBootstrapClients(trx);
      const existing = await findActivePlatformClient(trx, name);
      if (existing && existing.role === role && existsSync(file)) return;
      const secret = generateSecret();
      let client: ClientRow;
      if (existing && existing.role === role) {
        client = (await rotateSecret(trx, existing.id, hashSecret(secret), new Date()))!;
      } else {
        if (existing) await revokeClientRow(trx, existing.id);
        client = await insertClient(trx, {
          name,
          role,
          owner_id: null,
          secret_hash: hashSecret(secret),
          created_by: null,
        });
        // Recorded after the rows are written (the trail's lock is taken last).
        if (existing) await auditClient(record, null, 'revoked', existing, { reason: `bootstrapped again as ${role}` });
      }
      // Recorded before the file is written: a failed append leaves no file naming a client that does not exist.
      await auditClient(record, null, existing?.role === role ? 'secret_reissued' : 'bootstrapped', client, { file });
      const body = { client_id: client.id, client_secret: secret, role, name, created_at: new Date().toISOString() };
      const tmp = `${file}.${randomUUID()}.tmp`;
      writeFileSync(tmp, `${JSON.stringify(body, null, 2)}\n`, { mode: 0o600 });
      chmodSync(tmp, 0o600);
      renameSync(tmp, file);
      written.push(file);
    });
  }
  return written;
}
