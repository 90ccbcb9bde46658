export { ConsulRecorder, type RecordedCall } from './consul-recorder.ts';
export { createTestDatabase, type TestDatabase, testEnv } from './env.ts';
export { type Caller, startTestIssuer, type TestIssuer } from './issuer.ts';
export { captureLogs } from './logs.ts';
export { freePort, type ServerProcess, spawnServer, waitForHttp } from './server-process.ts';
