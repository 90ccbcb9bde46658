/**
 * Recording stand-in for the Consul agent's service API, for tests on
 * machines where the agent cannot be installed (docker-compose runs the real one).
 * Usage: tsx scripts/dev/consul-stub.ts [--port 8500]
 */
import { parseArgs } from 'node:util';
import { ConsulRecorder } from '@gpu/common/testing';
import { answerHelp } from '../lib/usage.ts';

answerHelp(`usage: node --import tsx scripts/dev/consul-stub.ts [--port 8500]

A stand-in for the Consul agent's service API that records registrations, for tests on machines without the agent.`);

const { values } = parseArgs({ options: { port: { type: 'string', default: '8500' } } });
const recorder = new ConsulRecorder();
const address = await recorder.start(Number(values.port));
process.stdout.write(`consul stand-in listening on ${address}\n`);
const stop = async () => {
  await recorder.close();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
