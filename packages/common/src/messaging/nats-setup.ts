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
 *   connects with its own inbox prefix (`serviceInboxPrefix`, which its user alone may read);
 * - `revocations.json`: the users those files held before, revoked (public keys and times only): the account's JWT
 *   names them, so a server that loads it (a reload, a restart) refuses a copy of an earlier creds file and closes
 *   its connections. A service reads its file again at each reconnection, so it comes back with the new user.
 * - `server/nats-values.yaml`: the same operator part as values of the official NATS Helm chart (`config.merge`).
 *
 * The creds are in a folder of their own too (a service is given its own file, never the seeds).
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCreds } from '@nats-io/jwt';
import { createFileOnce, replaceFile } from '../files.ts';
import {
  createNatsTrust,
  type NatsPermissions,
  type NatsRevocations,
  natsOperatorSettings,
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
  /** The services' earlier users, revoked (`revocations.json`). */
  revocations: string;
}

/** The user key a creds file holds (its JWT's subject), or undefined when there is no such file or it holds none. */
async function userKeyOf(file: string): Promise<string | undefined> {
  if (!existsSync(file)) return undefined;
  try {
    return (await parseCreds(readFileSync(file))).uc.sub;
  } catch {
    return undefined;
  }
}

/** The revocations `revocations.json` holds (none when there is no such file yet). */
function readRevocations(file: string): NatsRevocations {
  if (!existsSync(file)) return {};
  const { revoked } = JSON.parse(readFileSync(file, 'utf8')) as { revoked?: unknown };
  const entries = Object.entries(revoked ?? {});
  if (typeof revoked !== 'object' || !entries.every(([, at]) => Number.isInteger(at))) {
    throw new Error(`${file} is not a list of revoked NATS users ({"revoked": {"<user key>": <Unix seconds>}})`);
  }
  return Object.fromEntries(entries) as NatsRevocations;
}

/**
 * Writes (or completes) the set-up in `dir`: the trust made at the first run and reused after, the rest from it. Each
 * run issues each user in `users` (default `PLATFORM_NATS_USERS`) anew and revokes the one its creds file held.
 * Runs on one folder are one at a time (each reads and rewrites `revocations.json`).
 */
export async function writeNatsSetup(
  dir: string,
  users: Record<string, NatsPermissions> = PLATFORM_NATS_USERS,
): Promise<NatsSetup> {
  mkdirSync(join(dir, 'creds'), { recursive: true, mode: 0o700 });
  mkdirSync(join(dir, 'server'), { recursive: true, mode: 0o755 });
  const trustFile = join(dir, 'trust.json');
  if (!existsSync(trustFile)) createFileOnce(trustFile, `${JSON.stringify(createNatsTrust(), null, 2)}\n`, 0o600);
  const trust = parseNatsTrust(readFileSync(trustFile, 'utf8'));
  const issuer = join(dir, 'issuer.json');
  replaceFile(issuer, `${JSON.stringify({ account: trust.account, signer: trust.signer }, null, 2)}\n`, 0o600);
  // The users the creds files hold now are revoked before the files are replaced: a run cut short between the two
  // finds them again in the files, and the next one revokes them as well.
  const creds = Object.fromEntries(Object.keys(users).map((name) => [name, join(dir, 'creds', `${name}.creds`)]));
  const revocationsFile = join(dir, 'revocations.json');
  const revocations = readRevocations(revocationsFile);
  const now = Math.floor(Date.now() / 1000);
  for (const file of Object.values(creds)) {
    const earlier = await userKeyOf(file);
    if (earlier) revocations[earlier] = now;
  }
  replaceFile(revocationsFile, `${JSON.stringify({ revoked: revocations }, null, 2)}\n`, 0o644);
  for (const [name, permissions] of Object.entries(users)) {
    replaceFile(creds[name]!, await natsUserCreds(trust, name, { permissions }), 0o600);
  }
  const accounts = join(dir, 'server', 'accounts.conf');
  // The operator's JWT the last run wrote, kept, so that a running server can reload the new accounts.
  const operatorJwt = existsSync(accounts)
    ? /^operator: "([^"]+)"$/m.exec(readFileSync(accounts, 'utf8'))?.[1]
    : undefined;
  const account = { revocations, operatorJwt };
  replaceFile(accounts, await natsServerConfig(trust, account), 0o644);
  const helmValues = join(dir, 'server', 'nats-values.yaml');
  const values = { config: { merge: await natsOperatorSettings(trust, account) } };
  replaceFile(
    helmValues,
    "# The platform's NATS operator, for the NATS Helm chart (-f this file after deploy/k8s/dependencies/nats/values.yaml).\n" +
      `${JSON.stringify(values, null, 2)}\n`,
    0o644,
  );
  return { trust: trustFile, issuer, accounts, helmValues, creds, revocations: revocationsFile };
}
