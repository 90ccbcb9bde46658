export {
  type AccessReport,
  type AccessRule,
  accessCallers,
  CALLERS,
  type CallerName,
  checkAccessTable,
  routeKeys,
  type TableCaller,
} from './access-table.ts';
export { asIntruder, untilOlder } from './audit.ts';
export { ConsulRecorder, type RecordedCall } from './consul-recorder.ts';
export { createRoleDatabase, createTestDatabase, type RoleDatabase, type TestDatabase, testEnv } from './env.ts';
export { type Caller, injectAs, startTestIssuer, type TestIssuer, uninjected } from './issuer.ts';
export { lockWaiters } from './lock-waiters.ts';
export { captureLogs } from './logs.ts';
export { connectAsDaemon, firstStatus } from './nats-users.ts';
export { contractProblems } from './openapi-contract.ts';
export { type DriftOptions, requestSchemaDrift } from './request-drift.ts';
export {
  freePort,
  gatherOutput,
  type ServerProcess,
  spawnProcess,
  spawnServer,
  waitForHttp,
  waitForTcp,
} from './server-process.ts';
