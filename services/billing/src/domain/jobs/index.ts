/** Jobs: what a renter wants run and on what terms; billing places, follows and recovers them. */

export { followJobs } from './follow.ts';
export type { Job } from './job.ts';
export { nextQueueDeadline, placeJobs } from './place.ts';
export { cancelJob, jobList, readJob, submitJob } from './submit.ts';
