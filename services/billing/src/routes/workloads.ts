/** A session's workload: its parties read it, the machine's daemon reports its states (domain/workloads/). */
import { type App, callerOf, noBody, workloadSpecSchema, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import {
  grantWorkloadFiles,
  logRefs,
  MAX_OUTPUT_FILES,
  readWorkload,
  recordWorkloadCheckpoint,
  recordWorkloadOutputs,
  reportWorkload,
  type Workload,
  type WorkloadGrants,
} from '../domain/workloads/index.ts';
import { sessionJson } from '../wire/presenters.ts';
import { SESSION_ROLES, USAGE_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';
import { sessionSchema } from './session-schemas.ts';

/** A workload spec in a request (`POST /billing/start-session`'s `workload`). */
export const workloadSpecBody = workloadSpecSchema
  .meta({
    examples: [{ command: ['python3', 'train.py'], env: {}, inputs: [], network: false, max_runtime_seconds: 3600 }],
  })
  .register(schemas, { id: 'WorkloadSpec' });

const STATES = ['pending', 'preparing', 'running', 'exited', 'failed', 'stopped'] as const;

/** The largest checkpoint (one PUT's most). */
const MAX_CHECKPOINT_BYTES = 5 * 1024 ** 3;

/** The most refused output files a daemon names (the last one counts the rest). */
const MAX_REFUSED_OUTPUTS = 100;

/** An output file not kept, and why (as the daemon says it). */
const refusedOutput = z
  .object({
    path: z.string().min(1).max(1024).describe('a path relative to /work/output/'),
    reason: z
      .string()
      .min(1)
      .max(300)
      .describe('why it was not kept (`symbolic_link`, `too_large`, `store_refused: ...`)'),
  })
  .strict()
  .register(schemas, { id: 'RefusedOutput' });

const workloadSchema = z
  .object({
    session_id: z.uuid(),
    spec: workloadSpecBody,
    state: z.enum(STATES).describe('pending -> preparing -> running -> exited | failed | stopped'),
    exit_code: z.number().int().nullable().describe('its exit code once `exited`'),
    reason: z
      .string()
      .nullable()
      .describe(
        'why it `failed` or was `stopped`: `max_runtime`, `memory_limit`, `disk_limit`, `session_ended`, ' +
          '`not_started` (it did not run within `billing.workload_start_timeout`), ...',
      ),
    created_at: z.string(),
    preparing_at: z.string().nullable(),
    running_at: z.string().nullable().describe('when it started to run: billing starts then'),
    ended_at: z.string().nullable(),
    paid_until: z
      .string()
      .nullable()
      .optional()
      .describe(
        "until when the session's funds pay for running (its hold at the frozen rate, never past a cap's end; it " +
          'moves on as billing tops the hold up): a daemon that cannot reach billing stops the workload then; null ' +
          'once the session ended; in GET only',
      ),
    notice: z
      .object({
        reason: z.literal('preempted'),
        at: z.string().describe('when the session was preempted: billing ended then'),
        deadline: z.string().describe('`at` plus `billing.preemption_grace`: SIGKILL then'),
      })
      .nullable()
      .optional()
      .describe(
        'the notice its daemon gives the workload before stopping it (SIGTERM and the notice file, then SIGKILL at ' +
          'the deadline): a preempted interruptible session; null otherwise; in GET only',
      ),
    logs: z
      .object({ bucket: z.string().optional(), stdout: z.string(), stderr: z.string() })
      .nullable()
      .describe(
        "where its standard output and error are kept in the renter's storage (keys of their folder of the default " +
          'bucket unless `bucket` is named), uploaded every few seconds while it runs and at its end, each cut at the ' +
          "daemon's `workloads.log_kb`; null when it keeps no files in storage",
      ),
    outputs: z
      .array(z.object({ bucket: z.string().optional(), key: z.string(), size: z.number().int() }))
      .nullable()
      .describe('what it left in /work/output/, uploaded under `<output prefix>output/` at its end; null until then'),
    outputs_refused: z
      .array(refusedOutput)
      .nullable()
      .describe(
        'the files it left in /work/output/ that were not kept, each with why (a link, not a regular file, too large, ' +
          'too many, a name storage cannot hold, the store refused it: the rest were kept all the same); at most ' +
          '100 named, the last one counting the others; null until its outputs were reported',
      ),
    reach: z
      .object({
        bytes_in: z.number().int().describe("sent by the renter into the workload's streams"),
        bytes_out: z.number().int().describe('received by the renter from them'),
      })
      .describe(
        "the bytes of the renter's streams into it through the platform (`gpu exec`, `gpu shell`, forwarded ports, " +
          'HTTP to its ports, `ssh`), as their connections carried them, recorded every few seconds',
      ),
    session: sessionSchema,
  })
  .describe("A session's workload, and the session as it stands")
  .register(schemas, { id: 'Workload' });

const reportBody = z
  .object({
    state: z.enum(['preparing', 'running', 'exited', 'failed', 'stopped']),
    at: zTimestamp().describe("when it happened, by the daemon's clock (billing keeps it within its own bounds)"),
    exit_code: z.number().int().min(-255).max(255).optional().describe('with `exited`'),
    reason: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[a-z0-9_]+$/, 'a word such as max_runtime')
      .optional()
      .describe('with `failed` and `stopped`'),
  })
  .strict()
  .refine((b) => (b.state === 'exited') === (b.exit_code !== undefined), {
    path: ['exit_code'],
    message: 'an exit code comes with exited, and only with it',
  })
  .refine((b) => (b.state === 'failed' || b.state === 'stopped') === (b.reason !== undefined), {
    path: ['reason'],
    message: 'a reason comes with failed and stopped, and only with them',
  })
  .register(schemas, { id: 'WorkloadReport' });

/** A path under /work/output/ as the daemon names it (storage's key rules are applied to it). */
const outputPath = z.string().min(1).max(1024).describe('a path relative to /work/output/');

const grantBody = z
  .object({
    outputs: z.array(outputPath).max(MAX_OUTPUT_FILES).default([]).describe('the output files to upload (at the end)'),
  })
  .strict()
  .register(schemas, { id: 'WorkloadGrantRequest' });

const grantedObject = z.object({
  bucket: z.string(),
  key: z.string().describe("the object's key, as the renter names it"),
  url: z.string().describe('a presigned URL of it: GET for inputs, PUT for logs and outputs'),
});

const grantsSchema = z
  .object({
    inputs: z
      .array(grantedObject.extend({ path: z.string(), size: z.number().int().optional() }))
      .describe('to fetch into /work/inputs/<path> before the workload starts (empty once the session ended)'),
    logs: z.object({ stdout: grantedObject, stderr: grantedObject }),
    outputs: z.array(grantedObject.extend({ path: z.string() })),
    checkpoint: z
      .object({
        upload: grantedObject.describe("where this attempt keeps the job's checkpoint (a tar of /work/checkpoint/)"),
        restore: grantedObject
          .extend({ size: z.number().int() })
          .optional()
          .describe('the checkpoint the job kept last, to extract into /work/checkpoint/ before the workload starts'),
      })
      .optional()
      .describe("a job's checkpoint (its workload names `checkpoint`)"),
    expires_at: z.string().describe('when the URLs stop working (RFC 3339)'),
  })
  .describe("Presigned URLs of a workload's files")
  .register(schemas, { id: 'WorkloadGrants' });

const outputsBody = z
  .object({
    files: z.array(z.object({ path: outputPath, size: z.number().int().min(0) }).strict()).max(MAX_OUTPUT_FILES),
    refused: z
      .array(refusedOutput)
      .max(MAX_REFUSED_OUTPUTS)
      .default([])
      .describe('the files it did not upload, each with why'),
  })
  .strict()
  .register(schemas, { id: 'WorkloadOutputs' });

const checkpointBody = z
  .object({
    size: z
      .number()
      .int()
      .min(0)
      .max(MAX_CHECKPOINT_BYTES)
      .nullable()
      .describe(
        "the tar's bytes, as uploaded; null: after the workload's end, none is kept (it left no checkpoint directory, " +
          'or one that cannot be kept): nothing more will come',
      ),
  })
  .strict()
  .register(schemas, { id: 'WorkloadCheckpoint' });

const strip = ({ bucket, key, url }: { bucket: string; key: string; url: string }) => ({ bucket, key, url });

const grantsJson = (g: WorkloadGrants) => ({
  inputs: g.inputs.map(({ bucket, key, url, path, size }) => ({
    bucket,
    key,
    url,
    path,
    ...(size === undefined ? {} : { size }),
  })),
  logs: { stdout: strip(g.logs.stdout), stderr: strip(g.logs.stderr) },
  outputs: g.outputs.map(({ bucket, key, url, path }) => ({ bucket, key, url, path })),
  ...(g.checkpoint
    ? {
        checkpoint: {
          upload: strip(g.checkpoint.upload),
          ...(g.checkpoint.restore
            ? { restore: { ...strip(g.checkpoint.restore), size: g.checkpoint.restore.size } }
            : {}),
        },
      }
    : {}),
  expires_at: g.expiresAt.toISOString(),
});

const iso = (d: Date | null) => (d ? d.toISOString() : null);

const sessionParams = z.object({ sessionID: z.uuid() });

export async function workloadRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  /** A preempted session's notice: billing ended it at `at`; its workload is killed at the deadline. */
  const noticeOf = (s: Parameters<typeof sessionJson>[1]) =>
    s.end_reason === 'preempted' && s.ended_at
      ? {
          reason: 'preempted' as const,
          at: new Date(s.ended_at).toISOString(),
          deadline: new Date(new Date(s.ended_at).getTime() + ctx.sessions.preemptionGraceMs).toISOString(),
        }
      : null;
  const answer = (r: { session: Parameters<typeof sessionJson>[1]; workload: Workload; paidUntil?: Date | null }) => ({
    session_id: r.workload.sessionId,
    spec: r.workload.spec,
    state: r.workload.state,
    exit_code: r.workload.exitCode,
    reason: r.workload.reason,
    created_at: r.workload.createdAt.toISOString(),
    preparing_at: iso(r.workload.preparingAt),
    running_at: iso(r.workload.runningAt),
    ended_at: iso(r.workload.endedAt),
    ...(r.paidUntil === undefined ? {} : { paid_until: iso(r.paidUntil), notice: noticeOf(r.session) }),
    logs: r.workload.spec.output
      ? (({ stdout, stderr }) => ({
          ...(stdout.bucket === undefined ? {} : { bucket: stdout.bucket }),
          stdout: stdout.key,
          stderr: stderr.key,
        }))(logRefs(r.workload.spec.output))
      : null,
    outputs: r.workload.outputs,
    outputs_refused: r.workload.outputsRefused,
    reach: { bytes_in: r.workload.reach.bytesIn, bytes_out: r.workload.reach.bytesOut },
    session: sessionJson(ctx, r.session),
  });

  app.get(
    '/api/v1/billing/sessions/:sessionID/workload',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'getWorkload',
        summary: "A session's workload: its spec, state and times",
        description:
          "For the parties of the session: its renter, the machine's owner and daemon (which runs it from this " +
          'spec), admins and platform services. 404 WORKLOAD_NOT_FOUND for a session that runs none.',
        params: sessionParams,
        response: { 200: workloadSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) => answer(await readWorkload(ctx, callerOf(request), request.params.sessionID)),
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/workload/state',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'reportWorkloadState',
        summary: "The machine's daemon reports a workload's state",
        description:
          "`running` starts billing (at `at`, kept within the session's start and billing's clock less " +
          '`billing.max_clock_skew`); `exited`, `failed` and `stopped` end the session at `at`, billed to its last ' +
          "started minute, with the workload's end reason (a stop after the session ended records only when it " +
          'stopped). A state already reached or passed changes nothing (200, as it stands); another end after an end ' +
          'is 409 WORKLOAD_ENDED; `preparing` or `running` for a session that has ended is 409 SESSION_NOT_ACTIVE ' +
          "(start nothing, stop what runs). Only the daemon of the session's machine (or its owner), admins and services: " +
          '403 NOT_SESSION_PROVIDER otherwise.',
        params: sessionParams,
        body: reportBody,
        response: { 200: workloadSchema, ...problems(400, 403, 404, 409) },
      },
    },
    async (request) => {
      const b = request.body;
      return answer(
        await reportWorkload(
          ctx,
          callerOf(request),
          request.params.sessionID,
          { state: b.state, at: new Date(b.at), exitCode: b.exit_code, reason: b.reason },
          request.correlationId,
        ),
      );
    },
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/workload/grants',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'grantWorkloadFiles',
        summary: "Presigned URLs of a workload's inputs, logs and outputs, for its machine's daemon",
        description:
          "The daemon never holds the renter's credentials: it reads the inputs and writes the logs and outputs " +
          'through these URLs, of exactly those objects, each valid 10 minutes at most and no longer than ' +
          '`billing.workload_upload_window` (a URL signed before the end works at most that long past it). ' +
          'Inputs until the workload ' +
          'runs (none once it runs or its session ended); logs, and the output files named in `outputs` (paths relative to /work/output/, ' +
          'uploaded under `<output prefix>output/`: a path with `..` or a leading `/` is 400), until ' +
          '`billing.workload_upload_window` after the workload ended (409 UPLOAD_WINDOW_CLOSED after), never past ' +
          "it. Only the daemon of the session's machine (or its owner), admins and services (403 NOT_SESSION_PROVIDER); " +
          '409 WORKLOAD_FILES_UNAVAILABLE for a workload that keeps no files in storage; 409 ATTEMPT_SUPERSEDED for ' +
          "an attempt of a job placed again since (the job's outputs and logs are the later attempt's); " +
          '503 STORAGE_UNAVAILABLE.',
        params: sessionParams,
        body: grantBody,
        response: { 200: grantsSchema, ...problems(400, 403, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const grants = await grantWorkloadFiles(
        ctx,
        callerOf(request),
        request.params.sessionID,
        request.body.outputs,
        request.correlationId,
      );
      reply.header('cache-control', 'no-store');
      return grantsJson(grants);
    },
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/workload/outputs',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'recordWorkloadOutputs',
        summary: "The daemon says what it uploaded from a workload's output directory",
        description:
          'The workload then names these objects (`outputs`, keys under `<output prefix>output/`), replacing what was ' +
          'said before; in the upload window (409 UPLOAD_WINDOW_CLOSED after), by the same callers as the grants; ' +
          '409 ATTEMPT_SUPERSEDED for an attempt of a job placed again since.',
        params: sessionParams,
        body: outputsBody,
        response: { 200: workloadSchema, ...problems(400, 403, 404, 409) },
      },
    },
    async (request) => {
      const id = request.params.sessionID;
      await recordWorkloadOutputs(ctx, callerOf(request), id, request.body.files, request.body.refused);
      return answer(await readWorkload(ctx, callerOf(request), id));
    },
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/workload/checkpoint',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'recordWorkloadCheckpoint',
        summary: "The daemon says it kept a job's checkpoint whole",
        description:
          "After its PUT of the grant's `checkpoint.upload` succeeded: the job's next attempt restores this one (the " +
          'last said wins). After the workload ended, its final one (or `size: null`, none) also ends the wait of a ' +
          "job placed again for it. 204; 409 NO_CHECKPOINT for a workload that keeps none (not a job's, or naming no " +
          '`checkpoint`); in the upload window, by the same callers as the grants.',
        params: sessionParams,
        body: checkpointBody,
        response: { 204: noBody('recorded'), ...problems(400, 403, 404, 409) },
      },
    },
    async (request, reply) => {
      await recordWorkloadCheckpoint(ctx, callerOf(request), request.params.sessionID, request.body.size);
      return reply.code(204).send(null);
    },
  );
}
