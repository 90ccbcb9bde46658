/** Workloads: what a session runs on its GPUs, and how its states bill the session. */
export { endWorkloadsNeverStarted, readWorkload, reportWorkload } from './reports.ts';
export type { Workload } from './workload.ts';
