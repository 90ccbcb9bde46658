/**
 * A nats-server in operator mode for the tests and the benchmarks (scripts/test-env.sh): writes into `--dir` the
 * platform's NATS set-up as every deployment does (`writeNatsSetup`: `trust.json`, new keys each time; `issuer.json`;
 * `server/accounts.conf`; the platform services' creds), the server's configuration (`nats.conf`: its address, JetStream's
 * store under `--dir`, and the accounts included) and a `.creds` file of a user with every permission
 * (`platform.creds`), which the test servers connect with.
 *   node --import tsx scripts/dev/nats-operator.ts --dir DIR --port PORT
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { natsUserCreds, parseNatsTrust } from '../../packages/common/src/messaging/nats-auth.ts';
import { writeNatsSetup } from '../../packages/common/src/messaging/nats-setup.ts';

const { values } = parseArgs({ options: { dir: { type: 'string' }, port: { type: 'string' } } });
if (!values.dir || !values.port) throw new Error('usage: nats-operator.ts --dir DIR --port PORT');
// New keys each time: a test run trusts nobody an earlier one issued (and so has no earlier users to revoke).
for (const file of ['trust.json', 'users.json', 'creds'])
  rmSync(join(values.dir, file), { recursive: true, force: true });
const setup = await writeNatsSetup(values.dir);
const config = [
  `listen: 127.0.0.1:${Number(values.port)}`,
  `jetstream: { store_dir: ${JSON.stringify(join(values.dir, 'store'))} }`,
  `include ${JSON.stringify('server/accounts.conf')}`,
  '',
].join('\n');
writeFileSync(join(values.dir, 'nats.conf'), config, { mode: 0o600 });
const trust = parseNatsTrust(readFileSync(setup.trust, 'utf8'));
writeFileSync(join(values.dir, 'platform.creds'), await natsUserCreds(trust, 'platform'), { mode: 0o600 });
