/**
 * The real servers `scripts/test.sh` starts for the tests, read from the
 * environment it exports. A test run outside that script fails with a clear
 * message rather than silently skipping.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { fileCredentials } from '../messaging/publisher.ts';

function required(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the tests with \`pnpm test\` (scripts/test.sh starts the servers)`);
  return v;
}

export const testEnv = {
  /** Admin URL of the test PostgreSQL server (database `postgres`). */
  get pgUrl() {
    return required('TEST_PG_URL');
  },
  get natsUrl() {
    return required('TEST_NATS_URL');
  },
  /** The `.creds` file of a user with every permission on the test NATS server (it runs in operator mode). */
  get natsCredentials() {
    return required('TEST_NATS_CREDS');
  },
  /** The platform's NATS keys of the test server (`nats-auth.ts`), to issue users of its account. */
  get natsTrust() {
    return required('TEST_NATS_TRUST');
  },
  /** Options for `connect` from `@nats-io/transport-node`: the test server, with `natsCredentials`. */
  natsConnectOptions() {
    return { servers: this.natsUrl, authenticator: fileCredentials(this.natsCredentials) };
  },
  get s3Endpoint() {
    return required('TEST_S3_ENDPOINT');
  },
  get s3AccessKey() {
    return process.env.TEST_S3_ACCESS_KEY ?? 'S3RVER';
  },
  get s3SecretKey() {
    return process.env.TEST_S3_SECRET_KEY ?? 'S3RVER';
  },
  get solanaRpcUrl() {
    return required('TEST_SOLANA_RPC_URL');
  },
};

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

/** A fresh, empty database on the test server, for one test file. */
export async function createTestDatabase(prefix = 't'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: testEnv.pgUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  await admin.end();
  const url = new URL(testEnv.pgUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const c = new pg.Client({ connectionString: testEnv.pgUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await c.end();
    },
  };
}

export interface RoleDatabase {
  name: string;
  /** The schema's owner (it runs the migrations), the service's own role, and the audit trail's purge role. */
  ownerUrl: string;
  runtimeUrl: string;
  purgeUrl: string;
  drop(): Promise<void>;
}

/**
 * A fresh database owned by a role of its own that is not a superuser, with two more roles that own nothing (the
 * service's and the purge role: db/roles.ts), as a production set-up has them. The test server trusts every local
 * connection, so the roles need no passwords.
 */
export async function createRoleDatabase(prefix = 't'): Promise<RoleDatabase> {
  const suffix = randomBytes(5).toString('hex');
  const name = `${prefix}_${suffix}`;
  const roles = {
    owner: `${prefix}_owner_${suffix}`,
    runtime: `${prefix}_app_${suffix}`,
    purge: `${prefix}_purge_${suffix}`,
  };
  const admin = new pg.Client({ connectionString: testEnv.pgUrl });
  await admin.connect();
  for (const role of Object.values(roles)) await admin.query(`CREATE ROLE "${role}" LOGIN`);
  await admin.query(`CREATE DATABASE "${name}" OWNER "${roles.owner}"`);
  await admin.end();
  const urlOf = (role: string) => {
    const url = new URL(testEnv.pgUrl);
    url.username = role;
    url.pathname = `/${name}`;
    return url.toString();
  };
  return {
    name,
    ownerUrl: urlOf(roles.owner),
    runtimeUrl: urlOf(roles.runtime),
    purgeUrl: urlOf(roles.purge),
    drop: async () => {
      const c = new pg.Client({ connectionString: testEnv.pgUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      for (const role of Object.values(roles)) await c.query(`DROP ROLE IF EXISTS "${role}"`);
      await c.end();
    },
  };
}
