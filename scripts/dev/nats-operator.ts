/**
 * A nats-server in operator mode for the tests and the benchmarks (scripts/test-env.sh): writes into `--dir` the
 * platform's NATS trust (`trust.json`, new keys each time), the server's configuration (`nats.conf`: its address,
 * JetStream's store under `--dir`, the operator and the accounts) and a `.creds` file of a user with every permission
 * (`platform.creds`), which the test servers connect with.
 *   node --import tsx scripts/dev/nats-operator.ts --dir DIR --port PORT
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createNatsTrust, natsServerConfig, natsUserCreds } from '../../packages/common/src/messaging/nats-auth.ts';

const { values } = parseArgs({ options: { dir: { type: 'string' }, port: { type: 'string' } } });
if (!values.dir || !values.port) throw new Error('usage: nats-operator.ts --dir DIR --port PORT');
mkdirSync(values.dir, { recursive: true });
const trust = createNatsTrust();
writeFileSync(join(values.dir, 'trust.json'), `${JSON.stringify(trust, null, 2)}\n`, { mode: 0o600 });
const config = [
  `listen: 127.0.0.1:${Number(values.port)}`,
  `jetstream: { store_dir: ${JSON.stringify(join(values.dir, 'store'))} }`,
  await natsServerConfig(trust),
].join('\n');
writeFileSync(join(values.dir, 'nats.conf'), config, { mode: 0o600 });
writeFileSync(join(values.dir, 'platform.creds'), await natsUserCreds(trust, 'platform'), { mode: 0o600 });
