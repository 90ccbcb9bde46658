/**
 * NATS in operator mode (decentralized JWT authentication, nats-server 2.9): the server trusts one operator, whose
 * key signs the platform's account; the account's signing key signs a user JWT for every client, which names what the
 * client may publish and subscribe to, and the server enforces it. A client proves it holds the user's key by
 * signing the server's nonce (a `.creds` file carries the user JWT and its seed).
 *
 * The platform's trust is four seeds (`NatsTrust`): the operator, the system account (the server's own), the
 * platform account and that account's signing key, the one that issues users. `natsServerConfig` writes what
 * nats-server needs (the operator JWT, the system account, the account JWTs preloaded into a memory resolver);
 * `natsUserCreds` issues a user. Keys and JWTs come from the NATS team's libraries (`@nats-io/nkeys`,
 * `@nats-io/jwt`); nothing here signs by itself.
 */
import { decode, encodeAccount, encodeOperator, encodeUser, fmtCreds } from '@nats-io/jwt';
import { createAccount, createOperator, createUser, fromSeed, type KeyPair } from '@nats-io/nkeys';
import type { Principal } from '../auth/principal.ts';
import { isUuid } from '../paging.ts';

/** The platform's NATS keys, as seeds (secrets: whoever holds `signer` can issue any user of the account). */
export interface NatsTrust {
  operator: string;
  system_account: string;
  account: string;
  /** The platform account's signing key: issues users. */
  signer: string;
}

const seedOf = (kp: KeyPair) => new TextDecoder().decode(kp.getSeed());

/** New keys for a platform (each a random Ed25519 key). */
export function createNatsTrust(): NatsTrust {
  return {
    operator: seedOf(createOperator()),
    system_account: seedOf(createAccount()),
    account: seedOf(createAccount()),
    signer: seedOf(createAccount()),
  };
}

const keyOf = (seed: string) => fromSeed(new TextEncoder().encode(seed));

/** A new signing key for the platform account (its seed, secret, and its public key, which the account lists). */
export function createNatsSigner(): { seed: string; key: string } {
  const kp = createAccount();
  return { seed: seedOf(kp), key: kp.getPublicKey() };
}

/** The public keys of a trust (what a server's configuration and users name). */
export function natsPublicKeys(trust: NatsTrust) {
  return {
    operator: keyOf(trust.operator).getPublicKey(),
    systemAccount: keyOf(trust.system_account).getPublicKey(),
    account: keyOf(trust.account).getPublicKey(),
    signer: keyOf(trust.signer).getPublicKey(),
  };
}

/**
 * No connection limits (-1 is NATS's "no limit"): the system account's. An account JWT without limits reads as none
 * allowed: a server that reloads one closes the system account's own connections.
 */
const NO_CONNECTION_LIMITS = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
};

/** Unlimited: the JetStream and connection limits of the platform account. */
const UNLIMITED = {
  ...NO_CONNECTION_LIMITS,
  mem_storage: -1,
  disk_storage: -1,
  streams: -1,
  consumer: -1,
};

/**
 * User keys revoked in the platform account, each with a time (Unix seconds): the server refuses that key's JWTs issued
 * at or before it, and closes their connections when it loads the account.
 */
export type NatsRevocations = Record<string, number>;

/** What the account's JWT says beside its keys, and the operator's JWT to keep. */
export interface NatsAccountOptions {
  /** Users the account no longer admits. */
  revocations?: NatsRevocations;
  /**
   * Signing keys (public) the account admits beside the trust's own (which signs daemons' users): the set-up's key of
   * the day for the services' users. A key left out of a later JWT takes every user it signed with it.
   */
  signingKeys?: string[];
  /**
   * The operator's JWT as an earlier set-up wrote it, kept when the operator's key signed it: nats-server refuses to
   * reload a configuration whose operator JWT changed (a new one is made at each encoding), so the same one lets a
   * running server load the new accounts with a reload.
   */
  operatorJwt?: string;
}

/**
 * The operator's JWT: `kept` when it says what a new one would (the operator's key signed it, with the same name and
 * claims: only its time and ID differ), else the new one.
 */
async function operatorJwtOf(trust: NatsTrust, kept: string | undefined): Promise<string> {
  const keys = natsPublicKeys(trust);
  const fresh = await encodeOperator('platform', keyOf(trust.operator), { system_account: keys.systemAccount });
  if (!kept) return fresh;
  const same = (jwt: string) => {
    const { iss, sub, name, nats } = decode(jwt);
    return JSON.stringify({ iss, sub, name, nats });
  };
  try {
    return same(kept) === same(fresh) ? kept : fresh;
  } catch {
    return fresh;
  }
}

/**
 * The operator part of a nats-server configuration as settings (what the NATS Helm chart's `config.merge` takes): the
 * operator's JWT, the system account, and both accounts' JWTs in a memory resolver. JetStream is enabled for the
 * platform account; `revocations` are the users it no longer admits. Public: JWTs and public keys only.
 */
export async function natsOperatorSettings(
  trust: NatsTrust,
  opts: NatsAccountOptions = {},
): Promise<{
  operator: string;
  system_account: string;
  resolver: 'MEMORY';
  resolver_preload: Record<string, string>;
}> {
  const keys = natsPublicKeys(trust);
  const operator = keyOf(trust.operator);
  const operatorJwt = await operatorJwtOf(trust, opts.operatorJwt);
  const systemJwt = await encodeAccount(
    'SYS',
    keyOf(trust.system_account),
    { limits: NO_CONNECTION_LIMITS },
    { signer: operator },
  );
  const revocations = opts.revocations ?? {};
  const accountJwt = await encodeAccount(
    'PLATFORM',
    keyOf(trust.account),
    {
      limits: UNLIMITED,
      signing_keys: [keys.signer, ...(opts.signingKeys ?? [])],
      ...(Object.keys(revocations).length ? { revocations } : {}),
    },
    { signer: operator },
  );
  return {
    operator: operatorJwt,
    system_account: keys.systemAccount,
    resolver: 'MEMORY',
    resolver_preload: { [keys.systemAccount]: systemJwt, [keys.account]: accountJwt },
  };
}

/** The operator part of a nats-server configuration file (to include in one with its listen address and store). */
export async function natsServerConfig(trust: NatsTrust, opts: NatsAccountOptions = {}): Promise<string> {
  const s = await natsOperatorSettings(trust, opts);
  return [
    `operator: "${s.operator}"`,
    `system_account: ${s.system_account}`,
    `resolver: ${s.resolver}`,
    'resolver_preload: {',
    ...Object.entries(s.resolver_preload).map(([key, jwt]) => `  ${key}: "${jwt}"`),
    '}',
    '',
  ].join('\n');
}

/** What a user may do: subjects (wildcards allowed) it may publish to and subscribe to; absent: anything. */
export interface NatsPermissions {
  publish?: string[];
  /** Subjects it may not publish to, whatever `publish` allows. */
  publishDeny?: string[];
  subscribe?: string[];
}

/** What one connection of a user may hold: subscriptions, and bytes a message (NATS's -1: no limit). */
export interface NatsUserLimits {
  subs: number;
  payload: number;
}

/**
 * A provider daemon's connection: a handful of subscriptions (its answers, billing's nudges) and messages of up to
 * 256 KiB (a usage request of 256 reports is about 60 KiB, a heartbeat of 64 GPUs' metrics about 16 KiB).
 */
export const DAEMON_NATS_LIMITS: NatsUserLimits = { subs: 16, payload: 256 * 1024 };

/** A user JWT of the platform account for the user key `userKey` (public), signed by the account's signing key. */
export async function natsUserJwt(
  trust: NatsIssuer,
  name: string,
  userKey: string,
  opts: { permissions?: NatsPermissions; expiresInSeconds?: number; limits?: NatsUserLimits } = {},
): Promise<string> {
  const account = keyOf(trust.account).getPublicKey();
  const permissions = opts.permissions ?? {};
  return encodeUser(
    name,
    userKey,
    keyOf(trust.signer),
    {
      issuer_account: account,
      ...(permissions.publish || permissions.publishDeny
        ? {
            pub: {
              ...(permissions.publish ? { allow: permissions.publish } : {}),
              ...(permissions.publishDeny ? { deny: permissions.publishDeny } : {}),
            },
          }
        : {}),
      ...(permissions.subscribe ? { sub: { allow: permissions.subscribe } } : {}),
      ...(opts.limits ? { subs: opts.limits.subs, payload: opts.limits.payload, data: -1 } : {}),
    },
    opts.expiresInSeconds ? { exp: Math.floor(Date.now() / 1000) + opts.expiresInSeconds } : {},
  );
}

/** A `.creds` file for a new user of the platform account (its JWT and its seed). */
export async function natsUserCreds(
  trust: NatsIssuer,
  name: string,
  opts: { permissions?: NatsPermissions; expiresInSeconds?: number } = {},
): Promise<string> {
  const user = createUser();
  const jwt = await natsUserJwt(trust, name, user.getPublicKey(), opts);
  return new TextDecoder().decode(fmtCreds(jwt, user));
}

/** The seeds of `fields` in a JSON file's text, each checked to be one (`what` names the file in errors). */
function seedsOf<K extends keyof NatsTrust>(text: string, fields: readonly K[], what: string): Pick<NatsTrust, K> {
  const json = JSON.parse(text) as Partial<NatsTrust>;
  const seeds = Object.fromEntries(fields.map((f) => [f, json[f] ?? ''])) as Pick<NatsTrust, K>;
  for (const field of fields) {
    try {
      keyOf(seeds[field]);
    } catch {
      throw new Error(`the NATS ${what}'s ${field} is not an nkey seed`);
    }
  }
  return seeds;
}

/** The account seed and signing seed of a JSON file (a trust file, or one holding only those two). */
export const parseNatsIssuer = (text: string): NatsIssuer => seedsOf(text, ['account', 'signer'] as const, 'issuer');

/** What signs users of the platform account: its seed and its signing key's. */
export type NatsIssuer = Pick<NatsTrust, 'account' | 'signer'>;

/** Reads a trust file's JSON, checking each seed is one. */
export const parseNatsTrust = (text: string): NatsTrust =>
  seedsOf(text, ['operator', 'system_account', 'account', 'signer'] as const, 'trust');

/**
 * The subject prefixes a provider daemon's NATS user publishes on (the registry's heartbeats, billing's usage
 * requests): core NATS requests, never captured by a stream (messaging/requests.ts says why).
 */
export interface DaemonNatsSubjects {
  heartbeats: string;
  usage: string;
  /** Billing's nudges to machines: `<nudges>.<owner>.<provider ID>`. */
  nudges: string;
}

export const DAEMON_NATS_SUBJECTS: DaemonNatsSubjects = {
  heartbeats: 'registry.heartbeats',
  usage: 'billing.usage-reports',
  nudges: 'billing.events.machine',
};

/**
 * Where a daemon's requests take their answers: an inbox prefix of its own (nats.js `inboxPrefix`), so that its user
 * may subscribe to its answers and no one else's. Under `_INBOX.` as every NATS client's answers are, so that the
 * services that answer daemons may publish there (`_INBOX.>`) without a permission to answer anything they receive.
 */
export const daemonInboxPrefix = (client: string) => `_INBOX.${client}`;

/**
 * Whether `reply` is the daemon client's own inbox: the only place a service answers a message on a subject that
 * names that client, so that a message never makes it publish anywhere else.
 */
export const isDaemonInbox = (reply: string | undefined, client: string): boolean =>
  reply?.startsWith(`${daemonInboxPrefix(client)}.`) === true;

/**
 * What a provider daemon's NATS user may do: publish heartbeats and usage reports on subjects that name its owner and
 * itself (`<heartbeats>.<owner>.<client>.<provider ID>`, `<usage>.<owner>.<client>.<provider ID>`), which the server
 * enforces, so that a subscriber knows who sent a message from its subject; take the answers to its own requests; and
 * hear billing's nudges to its owner's machines (`<nudges>.<owner>.*`: they carry IDs only, and the owner's own).
 */
export function daemonNatsPermissions(
  identity: { owner: string; client: string },
  subjects: DaemonNatsSubjects = DAEMON_NATS_SUBJECTS,
): { publish: string[]; subscribe: string[] } {
  const own = `${identity.owner}.${identity.client}`;
  return {
    publish: [`${subjects.heartbeats}.${own}.*`, `${subjects.usage}.${own}.*`],
    subscribe: [`${daemonInboxPrefix(identity.client)}.>`, `${subjects.nudges}.${identity.owner}.*`],
  };
}

/**
 * The sender a subject names, `<prefix>.<owner ID>.<client ID>.<id>` (a daemon's NATS user may publish only there:
 * `daemonNatsPermissions`), and its last token; undefined for a subject of any other shape.
 */
export function subjectSender(
  prefix: string,
  subject: string,
): { owner: string; client: string; id: string } | undefined {
  if (!subject.startsWith(`${prefix}.`)) return undefined;
  const parts = subject.slice(prefix.length + 1).split('.');
  if (parts.length !== 3) return undefined;
  const [owner = '', client = '', id = ''] = parts;
  return isUuid(owner) && isUuid(client) ? { owner, client, id } : undefined;
}

/** The principal of the daemon client a subject names: no token, the NATS server vouched for who published it. */
export function subjectPrincipal(sender: { owner: string; client: string }): Principal {
  return {
    subject: sender.client,
    kind: 'client',
    roles: ['daemon'],
    actsFor: sender.owner,
    clientId: sender.client,
    tokenId: 'nats-subject',
  };
}
