/**
 * The real servers `scripts/test.sh` starts for the tests, read from the
 * environment it exports. A test run outside that script fails with a clear
 * message rather than silently skipping.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

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
