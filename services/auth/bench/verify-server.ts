/**
 * The server side of the token-verification benchmark, run as a child process
 * so it has a core to itself: one app with a bare route and a protected route
 * (the access control every service gets from @gpu/common's createApp). Prints its port on stdout.
 *   node --import tsx verify-server.ts '{"secret": "...", "cacheSize": 0, ...}'
 */
import {
  baseConfigSchema,
  callerOf,
  createApp,
  createLogger,
  createTokenVerifier,
  type TokenVerifierOptions,
} from '@gpu/common';

const options = JSON.parse(process.argv[2] ?? '{}') as TokenVerifierOptions;
const logger = createLogger({ service: 'bench', instanceId: 'bench', level: 'warn' });
const app = await createApp({
  service: 'bench-service',
  description: 'verification benchmark',
  config: baseConfigSchema.parse({ server: { metrics_enabled: false } }),
  logger,
  verifier: createTokenVerifier(options),
});
app.get('/bare', { config: { public: true } }, async () => ({ sub: 'anonymous' }));
app.get('/protected', async (request) => ({ sub: callerOf(request).subject }));
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
process.stdout.write(`PORT ${typeof address === 'object' && address ? address.port : 0}\n`);
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
