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
 * - `creds/<service>.creds`: a user of each platform service (`PLATFORM_NATS_USERS`), rewritten at each run so that
 *   a change of permissions takes effect at the services' next connection; secret;
 * - `server/nats-values.yaml`: the same operator part as values of the official NATS Helm chart (`config.merge`).
 *
 * The creds are in a folder of their own too (a service is given its own file, never the seeds).
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createFileOnce, replaceFile } from '../files.ts';
import {
  createNatsTrust,
  type NatsPermissions,
  natsOperatorSettings,
  natsServerConfig,
  natsUserCreds,
  parseNatsTrust,
} from './nats-auth.ts';

/** What every service's JetStream use needs: the stream and consumer API, acknowledgements, flow control, replies. */
const JETSTREAM = ['$JS.API.>', '$JS.ACK.>', '$JS.FC.>', '_INBOX.>'];

/**
 * The platform's own services as NATS users: each publishes under its own subject prefix alone (the default
 * prefixes: a service configured with other subjects needs users of its own), and reads anything. The registry also
 * answers the heartbeat requests it receives (on the daemon's own inbox). Daemons' users are auth's to issue.
 */
export const PLATFORM_NATS_USERS: Record<string, NatsPermissions> = {
  storage: { publish: ['storage.>', ...JETSTREAM] },
  'provider-registry': { publish: ['registry.>', ...JETSTREAM], responses: true },
  billing: { publish: ['billing.>', ...JETSTREAM] },
};

export interface NatsSetup {
  trust: string;
  issuer: string;
  accounts: string;
  helmValues: string;
  /** Each platform user's creds file, by name. */
  creds: Record<string, string>;
}

/**
 * Writes (or completes) the set-up in `dir`: the trust made at the first run and reused after, the rest from it.
 * `users`: the platform users to write creds for (default `PLATFORM_NATS_USERS`).
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
  const accounts = join(dir, 'server', 'accounts.conf');
  replaceFile(accounts, await natsServerConfig(trust), 0o644);
  const helmValues = join(dir, 'server', 'nats-values.yaml');
  const values = { config: { merge: await natsOperatorSettings(trust) } };
  replaceFile(
    helmValues,
    "# The platform's NATS operator, for the NATS Helm chart (-f this file after deploy/k8s/dependencies/nats/values.yaml).\n" +
      `${JSON.stringify(values, null, 2)}\n`,
    0o644,
  );
  const creds: Record<string, string> = {};
  for (const [name, permissions] of Object.entries(users)) {
    creds[name] = join(dir, 'creds', `${name}.creds`);
    replaceFile(creds[name], await natsUserCreds(trust, name, { permissions }), 0o600);
  }
  return { trust: trustFile, issuer, accounts, helmValues, creds };
}
