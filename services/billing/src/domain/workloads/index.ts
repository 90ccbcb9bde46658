/** Workloads: what a session runs on its GPUs, and how its states bill the session. */

export {
  assertWorkloadScopes,
  checkpointRef,
  grantWorkloadFiles,
  logRefs,
  MAX_OUTPUT_FILES,
  recordWorkloadCheckpoint,
  recordWorkloadOutputs,
  startWorkloadSession,
  type WorkloadGrants,
} from './files.ts';
export { endWorkloadsNeverStarted, readWorkload, reportWorkload } from './reports.ts';
export type { Workload } from './workload.ts';
