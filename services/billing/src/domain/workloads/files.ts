/**
 * A workload's files: its inputs, its logs and its outputs, all in its renter's storage, reached by the machine's
 * daemon only through grants for this session (presigned URLs of exactly those objects): the daemon never holds the
 * renter's credentials, and a grant reaches nothing else of theirs.
 *
 * - When the session starts, the storage service checks, as the renter, that they may read every input (it exists,
 *   it is theirs: someone else's is 403 `FOLDER_NOT_OWNED` or `BUCKET_NOT_OWNED`) and write their output prefix
 *   (`sessions/<session id>/` in their folder when the spec names none); a refusal refuses the start, before any
 *   money moves.
 * - The daemon asks for grants (`POST .../workload/grants`): read URLs of the inputs while the session runs, write
 *   URLs of the logs (`<prefix>logs/stdout.log`, `stderr.log`, uploaded again every few seconds as they grow) while
 *   it runs and for `billing.workload_upload_window` after the workload ended, and write URLs of the output files it
 *   names (`<prefix>output/<path>`, each path a relative key: nothing lands outside the prefix) in that window too.
 *   Each URL is valid 10 minutes at most, and no longer than the window's length: one signed while the session runs
 *   (its end unknown; a presigned URL cannot be taken back) expires within the window after the end.
 * - The daemon then says what it uploaded (`POST .../workload/outputs`): the session names those objects.
 */
import { randomUUID } from 'node:crypto';
import {
  AppError,
  assertScope,
  errors,
  inputPathOf,
  mayActFor,
  objectKeyProblem,
  type Principal,
  settledOutput,
  WORKLOAD_FILES,
  type WorkloadOutput,
  type WorkloadSpec,
  workloadSpecSchema,
} from '@gpu/common';
import {
  endFinalCheckpointWait,
  findJob,
  jobOfSession,
  laterAttemptThan,
  recordJobCheckpoint,
} from '../../db/job-repository.ts';
import { findWorkload, markFinalCheckpointSaid, recordOutputs } from '../../db/workload-repository.ts';
import { billingErrors } from '../../errors.ts';
import { mayReportUsage, notSessionProvider } from '../access.ts';
import type { BillingContext } from '../context.ts';
import type { KeyClaim } from '../idempotency.ts';
import {
  isRunning,
  loadSession,
  renterOf,
  type SessionStart,
  type StartSessionInput,
  startSession,
} from '../sessions/index.ts';
import type { GrantedObject, ObjectRef } from '../workload-storage.ts';
import type { RefusedOutput } from './workload.ts';

/** The longest a grant's URL is valid. */
const GRANT_SECONDS = 600;
/** Output files one workload may leave. */
export const MAX_OUTPUT_FILES = 1000;

const under = (output: WorkloadOutput, key: string): ObjectRef => ({
  ...(output.bucket === undefined ? {} : { bucket: output.bucket }),
  key: `${output.prefix}${key}`,
});

/** Where a workload's logs are kept. */
export const logRefs = (output: WorkloadOutput) => ({
  stdout: under(output, WORKLOAD_FILES.stdout),
  stderr: under(output, WORKLOAD_FILES.stderr),
});

/** The object an output file (`path` relative to `/work/output/`) is uploaded to; 400 for a path that would escape. */
function outputRef(output: WorkloadOutput, path: string, field: string): ObjectRef {
  const ref = under(output, `${WORKLOAD_FILES.output}${path}`);
  const problem = objectKeyProblem(path) ?? objectKeyProblem(ref.key);
  if (problem) throw billingErrors.invalidOutputPath(field, path, problem);
  return ref;
}

/**
 * A new session's workload with its output prefix settled (the default when it names none), after storage said the
 * renter may read its inputs and write there. Without a storage service: only a workload naming no files, which keeps
 * its logs on its machine.
 */
async function settleWorkloadFiles(
  ctx: BillingContext,
  renterId: string,
  sessionId: string,
  spec: WorkloadSpec,
  correlationId?: string,
): Promise<WorkloadSpec> {
  if (!ctx.storage) {
    if (spec.inputs.length > 0 || spec.output || spec.checkpoint) throw billingErrors.workloadStorageUnavailable();
    return spec;
  }
  const output = settledOutput(sessionId, spec.output);
  await ctx.storage.grant(
    {
      userId: renterId,
      read: spec.inputs.map(({ bucket, key }) => (bucket === undefined ? { key } : { bucket, key })),
      write: [logRefs(output).stdout],
      expirySeconds: 1,
    },
    correlationId,
  );
  return { ...spec, output };
}

/**
 * When the daemon may no longer write the session's files: `billing.workload_upload_window` after the workload ended
 * (or the session, when the daemon has not said yet); never while both run.
 */
function uploadWindowCloses(
  ctx: BillingContext,
  session: { ended_at: Date | null },
  row: { ended_at: Date | null },
): number {
  const endedAt = row.ended_at ?? session.ended_at;
  return endedAt ? new Date(endedAt).getTime() + ctx.sessions.workloadUploadWindowMs : Number.POSITIVE_INFINITY;
}

/**
 * Where an attempt of a job keeps the job's checkpoint: an object of its own (`jobs/<job>/checkpoints/<session>.tar`,
 * in the bucket of the workload's output), so that no two attempts ever write one object (a machine taken for dead may
 * still be uploading).
 */
export const checkpointRef = (spec: WorkloadSpec, jobId: string, sessionId: string): ObjectRef => ({
  ...(spec.output?.bucket === undefined ? {} : { bucket: spec.output.bucket }),
  key: `jobs/${jobId}/checkpoints/${sessionId}.tar`,
});

/** What the daemon may move for a session now. */
export interface WorkloadGrants {
  inputs: (GrantedObject & { path: string })[];
  logs: { stdout: GrantedObject; stderr: GrantedObject };
  outputs: (GrantedObject & { path: string })[];
  /**
   * A job's checkpoint (its workload names `checkpoint`): where this attempt keeps it, and, before its workload runs,
   * the one the job kept last to restore (none yet, or gone from the renter's storage: none).
   */
  checkpoint?: { upload: GrantedObject; restore?: GrantedObject & { size: number } };
  expiresAt: Date;
}

/**
 * Grants for the session's files, to its machine's daemon (or an admin or service): its inputs while the session runs,
 * its logs and the output files named by `outputPaths` until the upload window after the workload ended closes
 * (409 UPLOAD_WINDOW_CLOSED after). 404 for a session without a workload, 409 WORKLOAD_FILES_UNAVAILABLE when it keeps
 * no files in storage.
 */
export async function grantWorkloadFiles(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
  outputPaths: string[],
  correlationId?: string,
): Promise<WorkloadGrants> {
  const { session, row, spec } = await daemonsWorkload(ctx, actor, sessionId);
  if (!ctx.storage || !spec.output) throw billingErrors.workloadFilesUnavailable(sessionId);
  const now = ctx.now().getTime();
  const closes = uploadWindowCloses(ctx, session, row);
  if (now >= closes) throw billingErrors.uploadWindowClosed(sessionId);
  await notSuperseded(ctx, session);
  // A presigned URL cannot be taken back: one signed while the session runs (its end unknown) is valid no longer than
  // the upload window itself, so that none outlives the window after the end.
  const windowSeconds = Math.floor(ctx.sessions.workloadUploadWindowMs / 1000);
  const seconds = Math.max(1, Math.min(GRANT_SECONDS, windowSeconds, Math.floor((closes - now) / 1000)));
  const output = spec.output;
  // Inputs are fetched before the workload runs: granted until it does, never once it runs or its session ended.
  const beforeRun = isRunning(session) && (row.state === 'pending' || row.state === 'preparing');
  const inputs = beforeRun ? spec.inputs : [];
  const outputs = outputPaths.map((p, i) => ({ path: p, ref: outputRef(output, p, `body.outputs[${i}]`) }));
  const logs = logRefs(output);
  const jobId = spec.checkpoint ? jobOfSession(session.job_id) : null;
  const checkpoint = jobId ? [checkpointRef(spec, jobId, sessionId)] : [];
  const granted = await ctx.storage
    .grant(
      {
        userId: session.user_id,
        read: inputs.map(({ bucket, key }) => (bucket === undefined ? { key } : { bucket, key })),
        write: [logs.stdout, logs.stderr, ...outputs.map((o) => o.ref), ...checkpoint],
        expirySeconds: seconds,
      },
      correlationId,
    )
    .catch((err: unknown) => {
      throw asOutputRefusal(err, outputs);
    });
  // The job's last checkpoint is restored before the workload runs, like its inputs.
  const restore =
    jobId && beforeRun ? await restoreGrant(ctx, session.user_id, spec, jobId, seconds, correlationId) : null;
  return {
    inputs: inputs.map((input, i) => ({ ...granted.read[i]!, path: inputPathOf(input) })),
    logs: { stdout: granted.write[0]!, stderr: granted.write[1]! },
    outputs: outputs.map((o, i) => ({ ...granted.write[i + 2]!, path: o.path })),
    ...(jobId ? { checkpoint: { upload: granted.write[2 + outputs.length]!, ...(restore ? { restore } : {}) } } : {}),
    expiresAt: granted.expiresAt,
  };
}

/**
 * A read grant of the checkpoint the job kept last (null: none yet, or the renter removed it: the attempt starts
 * without, and says so in the daemon's log).
 */
async function restoreGrant(
  ctx: BillingContext,
  userId: string,
  spec: WorkloadSpec,
  jobId: string,
  seconds: number,
  correlationId?: string,
): Promise<(GrantedObject & { size: number }) | null> {
  const job = await findJob(ctx.db, jobId);
  if (!job?.checkpoint_session) return null;
  try {
    const granted = await ctx.storage!.grant(
      { userId, read: [checkpointRef(spec, jobId, job.checkpoint_session)], write: [], expirySeconds: seconds },
      correlationId,
    );
    const object = granted.read[0]!;
    return { ...object, size: object.size ?? Number(job.checkpoint_size ?? 0) };
  } catch (err) {
    if (err instanceof AppError && err.kind === 'not_found') return null;
    throw err;
  }
}

/**
 * Records that the session's attempt kept the job's checkpoint whole (`size` bytes, at its grant's object): the next
 * attempt restores it (unless its workload never ran, or the job points at one of a later attempt already); `null`:
 * after its workload's end, none is kept. Either ends a wait of the job for this attempt's final checkpoint. By the
 * machine's daemon (or an admin or service), while the session runs and in the upload window after; 409
 * NO_CHECKPOINT for a workload that keeps none (not a job's, or its spec names no `checkpoint`).
 */
export async function recordWorkloadCheckpoint(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
  size: number | null,
): Promise<void> {
  const { session, row, spec } = await daemonsWorkload(ctx, actor, sessionId);
  const jobId = jobOfSession(session.job_id);
  if (!spec.checkpoint || !jobId) throw billingErrors.noCheckpoint(sessionId);
  if (ctx.now().getTime() >= uploadWindowCloses(ctx, session, row)) throw billingErrors.uploadWindowClosed(sessionId);
  // Under the job's lock, which settling its attempt holds from reading whether the word came to deciding whether the
  // job waits for it (follow.ts): a word said meanwhile is either seen there, or finds the wait it decided on. (Without
  // the lock, the wait's end would read the job as it was before that settling committed, and end nothing.)
  const waited = await ctx.db.transaction().execute(async (trx) => {
    await findJob(trx, jobId, true);
    const now = ctx.now();
    // Not recorded (the daemon is done with it all the same): one of a workload that never ran (its directory is the
    // restored one, or what a failed restore left), and one of an earlier attempt than the job's last kept.
    if (size !== null && row.running_at) await recordJobCheckpoint(trx, jobId, sessionId, size, now);
    // Said after the workload's end (as read now: its daemon reports the end before it packs the final one), it is
    // the final one: an attempt settled from now on does not wait for it (the job's placer may be slower than the
    // daemon), and the job waiting for it is placed again. One taken while it ran (its upload may end after the
    // session did, taken back by its owner) is not: the final one follows.
    const final = size === null || Boolean((await findWorkload(trx, sessionId))?.ended_at);
    if (!final) return false;
    await markFinalCheckpointSaid(trx, sessionId, now);
    return endFinalCheckpointWait(trx, jobId, sessionId, now);
  });
  if (waited) ctx.state.wakeJobs();
}

/**
 * Storage's refusal of an output's key (one the store cannot hold: `body.write.<i>.key`, the logs first) as the
 * caller's own field, `body.outputs[<i - 2>]`, so that a daemon can leave that file out and ask again for the rest.
 */
function asOutputRefusal(err: unknown, outputs: { path: string }[]): unknown {
  if (!(err instanceof AppError) || err.kind !== 'invalid') return err;
  const at = /^body\.write\.(\d+)\.key$/.exec(err.errors?.[0]?.path ?? '');
  const output = at ? outputs[Number(at[1]) - 2] : undefined;
  if (!output) return err;
  const i = outputs.indexOf(output);
  return billingErrors.invalidOutputPath(`body.outputs[${i}]`, output.path, err.errors![0]!.message);
}

/** An output the daemon uploaded. */
export interface WrittenOutput {
  path: string;
  size: number;
}

/**
 * Records what the daemon uploaded from the workload's output directory (replacing what it said before): the session
 * names those objects. In the upload window, by the machine's daemon (or an admin or service).
 */
export async function recordWorkloadOutputs(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
  files: WrittenOutput[],
  refused: RefusedOutput[] = [],
): Promise<void> {
  const { session, row, spec } = await daemonsWorkload(ctx, actor, sessionId);
  if (!spec.output) throw billingErrors.workloadFilesUnavailable(sessionId);
  if (ctx.now().getTime() >= uploadWindowCloses(ctx, session, row)) throw billingErrors.uploadWindowClosed(sessionId);
  await notSuperseded(ctx, session);
  const output = spec.output;
  const objects = files.map((f, i) => ({ ...outputRef(output, f.path, `body.files[${i}].path`), size: f.size }));
  await recordOutputs(ctx.db, sessionId, objects, refused, ctx.now());
}

/**
 * Every attempt of a job writes the same outputs and logs (`<prefix>output/...`, `<prefix>logs/...`): an attempt the
 * job was placed again after (its machine taken for dead, back within the upload window) writes none of them, nor says
 * what it wrote, which would be the later attempt's (409 ATTEMPT_SUPERSEDED). Its checkpoint is its own object.
 */
async function notSuperseded(ctx: BillingContext, session: { id: string; job_id: string }): Promise<void> {
  if (!jobOfSession(session.job_id)) return;
  const later = await laterAttemptThan(ctx.db, session.id);
  if (later !== null) throw billingErrors.attemptSuperseded(session.id, later);
}

const parseSpec = (spec: unknown): WorkloadSpec =>
  workloadSpecSchema.parse(typeof spec === 'string' ? JSON.parse(spec) : spec);

/**
 * The session, its workload's row and spec, for its machine's daemon (or an admin or service: 403
 * NOT_SESSION_PROVIDER otherwise); 404 for a session without a workload. The grants and the daemon's reports of files.
 */
async function daemonsWorkload(ctx: BillingContext, actor: Principal, sessionId: string) {
  const session = await loadSession(ctx.db, sessionId);
  if (!mayReportUsage(actor, session)) throw notSessionProvider(sessionId);
  const row = await findWorkload(ctx.db, sessionId);
  if (!row) throw billingErrors.workloadNotFound(sessionId);
  return { session, row, spec: parseSpec(row.spec) };
}

/**
 * An API key's caller reaches the renter's storage through a workload only with the storage scopes too: a key of
 * `sessions` alone starts no workload that reads the renter's objects or writes into their storage.
 */
export function assertWorkloadScopes(ctx: BillingContext, actor: Principal, workload: WorkloadSpec): void {
  if (!actor.scopes) return;
  if (workload.inputs.length > 0) assertScope(actor, 'storage:read');
  if (ctx.storage || workload.output) assertScope(actor, 'storage:write');
}

/**
 * Starts a session that runs a workload: its files settled first (storage asked, as the renter, before any money
 * moves), under the session's own ID. Only the renter (or an admin or service) names whose storage it reads: a
 * caller starting for someone else is refused before storage is asked anything.
 */
export async function startWorkloadSession(
  ctx: BillingContext,
  asked: StartSessionInput & { workload: WorkloadSpec },
  idem: KeyClaim<SessionStart> | null,
): Promise<SessionStart> {
  assertWorkloadScopes(ctx, asked.actor, asked.workload);
  const renterId = renterOf(asked);
  if (!mayActFor(asked.actor, renterId)) {
    throw errors.forbidden(`a session of user ${renterId} is started by that user`, 'NOT_RENTER');
  }
  if (asked.workload.checkpoint && !(asked.jobId && jobOfSession(asked.jobId))) {
    throw errors.validation('a checkpoint is kept for jobs (POST /api/v1/billing/jobs), not for a session of its own', [
      { path: 'body.workload.checkpoint', message: 'a checkpoint is kept for jobs only' },
    ]);
  }
  const sessionId = asked.sessionId ?? randomUUID();
  const workload = await settleWorkloadFiles(ctx, renterId, sessionId, asked.workload, asked.correlationId);
  return startSession(ctx, { ...asked, sessionId, workload }, idem);
}
