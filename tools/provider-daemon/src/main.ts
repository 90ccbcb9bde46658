/**
 * The provider daemon process: `DAEMON_CONFIG_FILE=daemon.yaml node --import tsx src/main.ts`.
 * Stops cleanly on SIGINT/SIGTERM.
 */
import { readFileSync } from 'node:fs';
import { clientCredentials } from '@gpu/client';
import { createLogger } from '@gpu/common';
import { loadDaemonConfig } from './config.ts';
import { ProviderDaemon } from './daemon.ts';
import { gpuSource } from './gpu/source.ts';

const config = loadDaemonConfig();
const logger = createLogger({ service: 'provider-daemon', instanceId: config.provider.name, level: config.log_level });
let { client_id: clientId, client_secret: clientSecret } = config.credentials;
if (config.credentials.file) {
  ({ client_id: clientId, client_secret: clientSecret } = JSON.parse(readFileSync(config.credentials.file, 'utf8')));
}
if (!clientId || !clientSecret) {
  logger.fatal('no credentials: set credentials.client_id and client_secret, or credentials.file');
  process.exit(1);
}
const gpus = gpuSource(config.gpu);
if (gpus.kind === 'simulated') logger.warn('reporting a SIMULATED machine (gpu.source: simulated), not real GPUs');
const daemon = new ProviderDaemon({
  config,
  logger,
  gpus,
  token: clientCredentials({ authUrl: config.auth_url, clientId, clientSecret }),
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => daemon.stop());
await daemon.run();
logger.info('stopped');
