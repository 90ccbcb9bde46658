/**
 * A platform's NATS in operator mode, on disk: what `pnpm start`, docker-compose (auth's `nats.setup_dir`), the
 * Kubernetes set-up (`pnpm nats-setup`) and the tests write, from one place. In a folder:
 *
 * - `trust.json`: the four seeds (`NatsTrust`), made once and kept (a later run reuses them, so issued users and
 *   running servers stay valid); secret, and needed by nobody at run time but whoever re-runs the set-up;
 * - `issuer.json`: the platform account's seed and signing key's only, auth's `nats.issuer_file` (it signs daemons'
 *   users with them); secret;
 * - `server/accounts.conf`: the operator part of the server's configuration (public JWTs only), which a server's own
 *   configuration includes beside its address and JetStream store (a folder of its own, so that the server, and
 *   docker-compose's volume that carries it, never hold a seed);
 * - `creds/<service>.creds`: a user of each platform service (`PLATFORM_NATS_USERS`), a new one at each run (a new
 *   key), so that a change of permissions takes effect at the services' next connection; secret; each service
 *   connects with its own inbox prefix (`serviceInboxPrefix`, which its user alone may read). Each run signs them
 *   with a signing key of its own, made for the run and not kept: the account's JWT lists that key (beside the
 *   trust's, which signs daemons' users) and no earlier run's, so a server that loads it (a reload, a restart)
 *   refuses a copy of an earlier creds file and closes its connections, with no list that grows at every run. A
 *   service reads its file again at each reconnection, so it comes back with the new user.
 * - `users.json`: the users those files were given and the run's signing key (public keys and times only), and the
 *   users revoked one by one: those the trust's own key signed (set-ups before the run's key), which no run issues
 *   any more, so the list no longer grows.
 * - `server/nats-values.yaml`: the same operator part as values of the official NATS Helm chart (`config.merge`).
 *
 * The creds are in a folder of their own too (a service is given its own file, never the seeds).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCreds } from '@nats-io/jwt';
import { createFileOnce, replaceFile } from '../files.ts';
import {
  createNatsSigner,
  createNatsTrust,
  type NatsPermissions,
  type NatsRevocations,
  natsOperatorSettings,
  natsPublicKeys,
  natsServerConfig,
  natsUserCreds,
  parseNatsTrust,
} from './nats-auth.ts';

/** What a platform service does on NATS: the streams it keeps, the durable consumers it reads, what it serves. */
interface ServiceNats {
  /** The subjects it publishes on (its own prefix). */
  publish: string[];
  /** The streams it creates, widens and reads the state of. */
  streams: string[];
  /** Another service's streams it may create when it starts first (never change). */
  creates?: string[];
  /** Its durable pull consumers: [stream, durable name]. */
  consumers: [string, string][];
  /**
   * The daemons' requests it serves (core NATS subscriptions), which it answers on the daemon's inbox (`_INBOX.>`);
   * it may not publish there itself.
   */
  serves?: string[];
}

/**
 * Where a platform service's requests take their answers (nats.js `inboxPrefix`, JetStream's API and pull requests
 * included): a prefix of its own, so that its user may read its own answers and no one else's.
 */
export const serviceInboxPrefix = (service: string) => `_INBOX_${service}`;

/**
 * A service's permissions: publish on its own subjects; of JetStream's API only what its own streams and consumers
 * need (never delete or purge, never another service's consumer); acknowledge its own consumers' messages; subscribe
 * to its own inbox and the requests it serves; answer those on daemons' inboxes (`_INBOX.>`, every NATS client's
 * default prefix: a service's own is `_INBOX_<service>`, out of reach). No `allow_responses`: with it, a service that
 * sent itself a request whose reply subject is, say, `$JS.API.STREAM.DELETE.<stream>` could then publish there; for
 * the same reason it may not publish on the subjects it serves. So a service that is taken over cannot rewrite or
 * empty another's streams, read its messages or answers, or make a consumer that delivers onto subjects the others
 * trust. (It can still change its own streams' configuration: JetStream's API does not say which settings a
 * permission allows.)
 */
function servicePermissions(name: string, s: ServiceNats): NatsPermissions {
  const api = '$JS.API';
  return {
    publish: [
      ...s.publish,
      ...(s.serves?.length ? ['_INBOX.>'] : []),
      `${api}.INFO`,
      `${api}.STREAM.NAMES`,
      ...s.streams.flatMap((st) => ['INFO', 'CREATE', 'UPDATE'].map((op) => `${api}.STREAM.${op}.${st}`)),
      ...(s.creates ?? []).flatMap((st) => ['INFO', 'CREATE'].map((op) => `${api}.STREAM.${op}.${st}`)),
      ...s.consumers.flatMap(([st, d]) => [
        `${api}.CONSUMER.INFO.${st}.${d}`,
        `${api}.CONSUMER.CREATE.${st}.${d}`,
        `${api}.CONSUMER.CREATE.${st}.${d}.>`,
        `${api}.CONSUMER.DURABLE.CREATE.${st}.${d}`,
        `${api}.CONSUMER.MSG.NEXT.${st}.${d}`,
        `$JS.ACK.${st}.${d}.>`,
      ]),
    ],
    ...(s.serves?.length ? { publishDeny: s.serves } : {}),
    subscribe: [`${serviceInboxPrefix(name)}.>`, ...(s.serves ?? [])],
  };
}

/**
 * The platform's own services as NATS users, for their default subjects, streams and consumer names (a service
 * configured with others needs users of its own: `writeNatsSetup(dir, users)`). The registry and billing serve
 * daemons' requests (heartbeats, usage reports) and answer them. Daemons' users are auth's to issue.
 */
export const PLATFORM_NATS_USERS: Record<string, NatsPermissions> = {
  storage: servicePermissions('storage', { publish: ['storage.>'], streams: ['STORAGE_USAGE'], consumers: [] }),
  'provider-registry': servicePermissions('provider-registry', {
    publish: ['registry.>'],
    streams: ['REGISTRY'],
    consumers: [
      ['BILLING_EVENTS', 'provider-registry-sessions'],
      ['BILLING_EVENTS', 'provider-registry-leases'],
      ['BILLING_EVENTS', 'provider-registry-prices'],
    ],
    serves: ['registry.heartbeats.>'],
  }),
  billing: servicePermissions('billing', {
    publish: ['billing.>'],
    streams: ['BILLING_EVENTS', 'BILLING_USAGE'],
    // The storage service's usage stream: billing makes it when it starts first.
    creates: ['STORAGE_USAGE'],
    consumers: [
      ['BILLING_USAGE', 'billing-usage'],
      ['STORAGE_USAGE', 'billing-storage-usage'],
      ['REGISTRY', 'billing-provider-status'],
    ],
    serves: ['billing.usage-reports.>'],
  }),
};

export interface NatsSetup {
  trust: string;
  issuer: string;
  accounts: string;
  helmValues: string;
  /** Each platform user's creds file, by name. */
  creds: Record<string, string>;
  /** The services' users issued, and the earlier ones revoked (`users.json`). */
  users: string;
}

/** A service user as issued: its key, when (the JWT's `iat`), and the signing key that signed it (absent: the trust's). */
interface IssuedUser {
  key: string;
  at: number;
  signer?: string;
}

/** `users.json`: the account's service users, the current ones by name and the earlier ones revoked (public keys). */
interface UsersRecord {
  /** The platform account's public key (a record of another account, before a new trust, is started over). */
  account: string;
  /** The user each service's creds file was given. */
  issued: Record<string, IssuedUser>;
  /** The signing key of the run that issued them (public), which the account's JWT lists; absent before there was one. */
  signer?: string;
  /** Users revoked one by one: those the trust's own signing key signed. */
  revoked: NatsRevocations;
}

const isUserKey = (key: string) => /^U[A-Z2-7]{55}$/.test(key);
const isAccountKey = (key: string) => /^A[A-Z2-7]{55}$/.test(key);

/** `users.json` of the account `account` (empty when there is none yet, or when it is another account's). */
function readUsers(file: string, account: string): UsersRecord {
  const empty: UsersRecord = { account, issued: {}, revoked: {} };
  if (!existsSync(file)) return empty;
  const bad = (why: string) => new Error(`${file}: ${why} (delete it only with trust.json: it revokes earlier users)`);
  let json: Partial<UsersRecord>;
  try {
    json = JSON.parse(readFileSync(file, 'utf8')) as Partial<UsersRecord>;
  } catch (err) {
    throw bad(`not JSON (${(err as Error).message})`);
  }
  if (json.account !== account) return empty;
  const { issued, revoked } = json;
  const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isMap(issued) || !isMap(revoked)) throw bad('expected {"account", "issued": {...}, "revoked": {...}}');
  for (const [key, at] of Object.entries(revoked)) {
    if (!isUserKey(key) || !Number.isInteger(at)) throw bad(`revoked ${key}: not a user key and a time`);
  }
  for (const [name, user] of Object.entries(issued)) {
    const u = user as { key?: unknown; at?: unknown; signer?: unknown };
    if (!isMap(user) || typeof u.key !== 'string' || !isUserKey(u.key) || !Number.isInteger(u.at)) {
      throw bad(`issued ${name}: not a user key and a time`);
    }
    if (u.signer !== undefined && (typeof u.signer !== 'string' || !isAccountKey(u.signer))) {
      throw bad(`issued ${name}: its signer is not an account key`);
    }
  }
  return json as UsersRecord;
}

/** The user a creds file holds when the account `account` issued it, else undefined. */
async function credsUser(file: string, account: string): Promise<IssuedUser | undefined> {
  try {
    const { uc } = await parseCreds(readFileSync(file));
    return uc.nats.issuer_account === account ? { key: uc.sub, at: uc.iat, signer: uc.iss } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes (or completes) the set-up in `dir`: the trust made at the first run and reused after, the rest from it. Each
 * run issues each user in `users` (default `PLATFORM_NATS_USERS`) anew, signed by a new signing key of the run's, and
 * every user issued before stops working: those of an earlier run's key with the key, which the account no longer
 * lists; those the trust's own key signed (`users.json` names them, or a creds file in `creds/` holds them: set-ups
 * from before the run's keys) by revocation. Runs on one folder are one at a time (each reads and rewrites
 * `users.json`).
 */
export async function writeNatsSetup(
  dir: string,
  users: Record<string, NatsPermissions> = PLATFORM_NATS_USERS,
): Promise<NatsSetup> {
  const credsDir = join(dir, 'creds');
  mkdirSync(credsDir, { recursive: true, mode: 0o700 });
  mkdirSync(join(dir, 'server'), { recursive: true, mode: 0o755 });
  const trustFile = join(dir, 'trust.json');
  if (!existsSync(trustFile)) createFileOnce(trustFile, `${JSON.stringify(createNatsTrust(), null, 2)}\n`, 0o600);
  const trust = parseNatsTrust(readFileSync(trustFile, 'utf8'));
  const issuer = join(dir, 'issuer.json');
  replaceFile(issuer, `${JSON.stringify({ account: trust.account, signer: trust.signer }, null, 2)}\n`, 0o600);
  const account = natsPublicKeys(trust).account;
  const usersFile = join(dir, 'users.json');
  const record = readUsers(usersFile, account);
  // Revoked as of now, or of the JWT's own time where that is later (a clock behind the one that issued it): the
  // server refuses a key's JWTs issued at or before the time. A key is never issued again, so a later time is safe.
  const now = Math.floor(Date.now() / 1000);
  // Only a user the trust's own key signed needs revoking: an earlier run's key leaves the account's JWT below.
  const trustSigner = natsPublicKeys(trust).signer;
  const revoke = ({ key, at, signer }: IssuedUser) => {
    if (signer !== undefined && signer !== trustSigner) return;
    record.revoked[key] = Math.max(now, at, record.revoked[key] ?? 0);
  };
  for (const user of Object.values(record.issued)) revoke(user);
  for (const file of readdirSync(credsDir).filter((f) => f.endsWith('.creds'))) {
    const held = await credsUser(join(credsDir, file), account);
    if (held) revoke(held);
  }
  // The run's signing key: its seed signs this run's users and is then forgotten (no later user needs it).
  const signer = createNatsSigner();
  const runIssuer = { account: trust.account, signer: signer.seed };
  // The new users are recorded before their files are written: a run cut short in between leaves files that the next
  // run's JWT, without this run's key, no longer admits, whichever files it finds.
  const fresh = await Promise.all(
    Object.entries(users).map(async ([name, permissions]) => {
      const text = await natsUserCreds(runIssuer, name, { permissions });
      const { uc } = await parseCreds(new TextEncoder().encode(text));
      return { name, text, key: uc.sub, at: uc.iat };
    }),
  );
  record.issued = Object.fromEntries(fresh.map(({ name, key, at }) => [name, { key, at, signer: signer.key }]));
  record.signer = signer.key;
  replaceFile(usersFile, `${JSON.stringify(record, null, 2)}\n`, 0o644);
  const creds: Record<string, string> = {};
  for (const { name, text } of fresh) {
    creds[name] = join(credsDir, `${name}.creds`);
    replaceFile(creds[name], text, 0o600);
  }
  const { revoked: revocations } = record;
  const accounts = join(dir, 'server', 'accounts.conf');
  // The operator's JWT the last run wrote, kept, so that a running server can reload the new accounts.
  const operatorJwt = existsSync(accounts)
    ? /^operator: "([^"]+)"$/m.exec(readFileSync(accounts, 'utf8'))?.[1]
    : undefined;
  const settings = { revocations, operatorJwt, signingKeys: [signer.key] };
  replaceFile(accounts, await natsServerConfig(trust, settings), 0o644);
  const helmValues = join(dir, 'server', 'nats-values.yaml');
  const values = { config: { merge: await natsOperatorSettings(trust, settings) } };
  replaceFile(
    helmValues,
    "# The platform's NATS operator, for the NATS Helm chart (-f this file after deploy/k8s/dependencies/nats/values.yaml).\n" +
      `${JSON.stringify(values, null, 2)}\n`,
    0o644,
  );
  return { trust: trustFile, issuer, accounts, helmValues, creds, users: usersFile };
}
