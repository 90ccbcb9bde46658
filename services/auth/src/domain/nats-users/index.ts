/**
 * Provider daemons' NATS users: a daemon that holds a live machine client asks for a user of the platform's NATS
 * account for a key it made itself (its seed never leaves the daemon), and gets a user JWT that lets it publish only
 * on subjects naming its owner and itself (`daemonNatsPermissions`), for `nats.user_ttl`. The NATS server enforces
 * that, so the registry and billing know who sent a message from its subject. A client revoked (or whose owner may no
 * longer be served) gets no new user, and its last one expires with its lifetime.
 */
import {
  DAEMON_NATS_LIMITS,
  daemonNatsPermissions,
  durationMs,
  errors,
  natsUserJwt,
  type Principal,
} from '@gpu/common';
import { fromPublic } from '@nats-io/nkeys';
import { audit } from '../audit.ts';
import { clientRefusal } from '../clients.ts';
import type { AuthContext } from '../context.ts';

export interface NatsUser {
  jwt: string;
  /** Whom its subjects name: the owner the client acts for, and the client. */
  owner_id: string;
  client_id: string;
  expires_at: Date;
  publish: string[];
  subscribe: string[];
}

/** Whether `key` is an nkey user public key (`U...`). */
function isUserPublicKey(key: string): boolean {
  if (!key.startsWith('U')) return false;
  try {
    fromPublic(key);
    return true;
  } catch {
    return false;
  }
}

/** A NATS user for the daemon client `caller`, for its public key `publicKey`. */
export async function issueDaemonNatsUser(ctx: AuthContext, caller: Principal, publicKey: string): Promise<NatsUser> {
  const { nats } = ctx.config;
  const issuer = ctx.natsIssuer;
  if (!issuer) {
    throw errors.notFound(
      'NATS_USERS_DISABLED',
      'this platform issues no NATS users (auth has no nats.issuer_file or nats.setup_dir)',
    );
  }
  const client = caller.clientId;
  const owner = caller.actsFor;
  if (caller.kind !== 'client' || !caller.roles.includes('daemon') || !client || !owner) {
    throw errors.forbidden("only a provider daemon's machine client is issued a NATS user", 'ROLE_REQUIRED');
  }
  if (!isUserPublicKey(publicKey)) {
    throw errors.validation('not a NATS user public key', [
      { path: 'body.public_key', message: 'an nkey user public key: U and 55 base32 characters' },
    ]);
  }
  const refusal = await clientRefusal(ctx, client);
  if (refusal) {
    await audit(
      ctx,
      {
        action: 'nats_user_refused',
        outcome: 'refused',
        actor: caller,
        target: `client:${client}`,
        details: { reason: refusal },
      },
      'NATS user refused',
    );
    throw errors.unauthorized(`this daemon client may no longer act (${refusal})`, 'CLIENT_REVOKED');
  }
  const permissions = daemonNatsPermissions(
    { owner, client },
    { heartbeats: nats.heartbeat_subject, usage: nats.usage_reports_subject, nudges: nats.nudge_subject },
  );
  const ttlSeconds = Math.max(1, Math.round(durationMs(nats.user_ttl) / 1000));
  const jwt = await natsUserJwt(issuer, `daemon-${client}`, publicKey, {
    permissions,
    expiresInSeconds: ttlSeconds,
    limits: DAEMON_NATS_LIMITS,
  });
  ctx.logger.info({ audit: true, action: 'nats_user_issued', client_id: client, owner_id: owner }, 'NATS user issued');
  return {
    jwt,
    owner_id: owner,
    client_id: client,
    expires_at: new Date(Date.now() + ttlSeconds * 1000),
    ...permissions,
  };
}
