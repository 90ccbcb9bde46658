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
import { encodeAccount, encodeOperator, encodeUser, fmtCreds } from '@nats-io/jwt';
import { createAccount, createOperator, createUser, fromSeed, type KeyPair } from '@nats-io/nkeys';

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

/** The public keys of a trust (what a server's configuration and users name). */
export function natsPublicKeys(trust: NatsTrust) {
  return {
    operator: keyOf(trust.operator).getPublicKey(),
    systemAccount: keyOf(trust.system_account).getPublicKey(),
    account: keyOf(trust.account).getPublicKey(),
    signer: keyOf(trust.signer).getPublicKey(),
  };
}

/** Unlimited: the JetStream and connection limits of the platform account (-1 is NATS's "no limit"). */
const UNLIMITED = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
  mem_storage: -1,
  disk_storage: -1,
  streams: -1,
  consumer: -1,
};

/**
 * The operator part of a nats-server configuration (to append to one with its listen address and JetStream store):
 * the operator's JWT, the system account, and both accounts' JWTs in a memory resolver. JetStream is enabled for the
 * platform account.
 */
export async function natsServerConfig(trust: NatsTrust): Promise<string> {
  const keys = natsPublicKeys(trust);
  const operator = keyOf(trust.operator);
  const operatorJwt = await encodeOperator('platform', operator, { system_account: keys.systemAccount });
  const systemJwt = await encodeAccount('SYS', keyOf(trust.system_account), {}, { signer: operator });
  const accountJwt = await encodeAccount(
    'PLATFORM',
    keyOf(trust.account),
    { limits: UNLIMITED, signing_keys: [keys.signer] },
    { signer: operator },
  );
  return [
    `operator: "${operatorJwt}"`,
    `system_account: ${keys.systemAccount}`,
    'resolver: MEMORY',
    'resolver_preload: {',
    `  ${keys.systemAccount}: "${systemJwt}"`,
    `  ${keys.account}: "${accountJwt}"`,
    '}',
    '',
  ].join('\n');
}

/** What a user may do: subjects (wildcards allowed) it may publish to and subscribe to; absent: anything. */
export interface NatsPermissions {
  publish?: string[];
  subscribe?: string[];
}

/** A user JWT of the platform account for the user key `userKey` (public), signed by the account's signing key. */
export async function natsUserJwt(
  trust: Pick<NatsTrust, 'account' | 'signer'>,
  name: string,
  userKey: string,
  opts: { permissions?: NatsPermissions; expiresInSeconds?: number } = {},
): Promise<string> {
  const account = keyOf(trust.account).getPublicKey();
  const permissions = opts.permissions ?? {};
  return encodeUser(
    name,
    userKey,
    keyOf(trust.signer),
    {
      issuer_account: account,
      ...(permissions.publish ? { pub: { allow: permissions.publish } } : {}),
      ...(permissions.subscribe ? { sub: { allow: permissions.subscribe } } : {}),
    },
    opts.expiresInSeconds ? { exp: Math.floor(Date.now() / 1000) + opts.expiresInSeconds } : {},
  );
}

/** A `.creds` file for a new user of the platform account (its JWT and its seed). */
export async function natsUserCreds(
  trust: Pick<NatsTrust, 'account' | 'signer'>,
  name: string,
  opts: { permissions?: NatsPermissions; expiresInSeconds?: number } = {},
): Promise<string> {
  const user = createUser();
  const jwt = await natsUserJwt(trust, name, user.getPublicKey(), opts);
  return new TextDecoder().decode(fmtCreds(jwt, user));
}

/** Reads a trust file's JSON, checking each seed is one. */
export function parseNatsTrust(text: string): NatsTrust {
  const json = JSON.parse(text) as Partial<NatsTrust>;
  const trust = {
    operator: json.operator ?? '',
    system_account: json.system_account ?? '',
    account: json.account ?? '',
    signer: json.signer ?? '',
  };
  for (const [name, seed] of Object.entries(trust)) {
    try {
      keyOf(seed);
    } catch {
      throw new Error(`the NATS trust's ${name} is not an nkey seed`);
    }
  }
  return trust;
}
