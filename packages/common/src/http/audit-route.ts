/**
 * `GET <url>`: a service's audit trail (db/audit-trail.ts) for admins, oldest first, with filters and the platform's
 * keyset paging; `GET <url>/verify`: its chain checked (db/audit-verify.ts), naming the first broken link. Each service
 * mounts them where its routes live (auth: /api/v1/auth/audit, billing: /api/v1/billing/audit).
 */
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { z } from 'zod';
import { type AuditOutcome, listAudit } from '../db/audit-trail.ts';
import { verifyAuditChain } from '../db/audit-verify.ts';
import { errors } from '../errors.ts';
import { PAGE_HEADERS, type SchemaRegistry } from '../openapi/route-docs.ts';
import { afterCursor, keysetPage } from '../paging.ts';
import { zTimestamp } from '../timestamp.ts';
import { pageQuery, setNextPage } from './paging.ts';
import { problemSchema } from './problem-schema.ts';

export function auditTrailRoute(
  app: FastifyInstance,
  opts: {
    db: Kysely<never>;
    url: string;
    schemas: SchemaRegistry;
    examples: string;
    /** The outcomes its events may have, described (default: succeeded, refused, failed). */
    outcomes?: { values: readonly [AuditOutcome, ...AuditOutcome[]]; describe: string };
  },
): void {
  const outcomes = opts.outcomes ?? {
    values: ['succeeded', 'refused', 'failed'] as const,
    describe: 'succeeded; refused: not allowed, or the request was wrong; failed: the service could not do it',
  };
  const outcome = z.enum(outcomes.values);
  const auditEventSchema = z
    .object({
      id: z.uuid(),
      at: z.string().describe('RFC 3339, UTC, to the microsecond: when the event joined the chain'),
      seq: z.number().int().describe('its place in the chain: 1, 2, 3, … (GET …/audit/verify checks it)'),
      action: z.string().describe(opts.examples),
      outcome: outcome.describe(outcomes.describe),
      actor_id: z.string().nullable().describe("a user's or a machine client's ID; null when nobody known acted"),
      actor_kind: z.enum(['user', 'client']).nullable(),
      actor_credential: z.string().nullable().describe("the API key's ID (or mailed_code) when not the sign-in itself"),
      address: z.string().nullable().describe("the client's address"),
      target: z.string().nullable().describe('what was acted on, as kind:id'),
      details: z.record(z.string(), z.unknown()),
      request_id: z.string().nullable(),
    })
    .describe('One security- or money-relevant action')
    .register(opts.schemas, { id: 'AuditEvent' });
  const problems = Object.fromEntries([400, 401, 403].map((s) => [s, problemSchema]));
  app.get(
    opts.url,
    {
      config: { roles: ['admin'], openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags: ['audit'],
        operationId: 'listAuditEvents',
        summary: 'The audit trail: who did what, when, from where, and the outcome (oldest first)',
        description:
          'Admins only. Filters: action, actor_id, target, outcome, and from/to (RFC 3339, [from, to)). Paged as every ' +
          'list. Append-only and chained by hash: nothing updates an event, and the database deletes none younger than ' +
          'audit.retention, and those only from the start of the chain (the retention purge).',
        querystring: z.object({
          ...pageQuery,
          action: z.string().min(1).max(100).optional(),
          actor_id: z.uuid().optional(),
          target: z.string().min(1).max(200).optional(),
          outcome: outcome.optional(),
          from: zTimestamp().optional(),
          to: zTimestamp().optional(),
        }),
        response: { 200: z.array(auditEventSchema).register(opts.schemas, { id: 'AuditEventList' }), ...problems },
      },
    },
    async (request, reply) => {
      const q = request.query as {
        limit: number;
        cursor?: string;
        action?: string;
        actor_id?: string;
        target?: string;
        outcome?: AuditOutcome;
        from?: string;
        to?: string;
      };
      const rows = await listAudit(opts.db, {
        action: q.action,
        actorId: q.actor_id,
        target: q.target,
        outcome: q.outcome,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
        after: afterCursor(q.cursor),
        limit: q.limit + 1,
      });
      const page = keysetPage(rows, q.limit);
      setNextPage(request, reply, page.nextCursor);
      return page.items.map(({ cursor_at, ...e }) => ({ ...e, at: cursor_at }));
    },
  );

  const checkSchema = z
    .object({
      intact: z.boolean().describe('every event from the anchor to the head is intact and in its place'),
      events: z.number().int().describe('events checked'),
      anchor_seq: z
        .number()
        .int()
        .describe('the newest event purged past the retention (0: none); the check starts after it'),
      head_seq: z.number().int().describe('the newest event'),
      head_hash: z
        .string()
        .describe("the head's hash (hex): kept elsewhere, it shows a later rewrite of the chain up to it"),
      broken: z
        .object({
          seq: z.number().int(),
          id: z.string().nullable().describe('null when the missing event is the head itself'),
          reason: z
            .enum(['altered', 'link', 'missing', 'head', 'rewritten'])
            .describe(
              'altered: its content does not hash to its hash; link: it does not carry the previous hash; missing: ' +
                'events before it are gone; head: the chain does not end at its recorded head; rewritten: the head ' +
                'asked about (seq, hash) is not in the chain as it was',
            ),
          detail: z.string(),
        })
        .nullable()
        .describe('the first broken link; null when intact'),
      known: z
        .object({
          seq: z.number().int(),
          hash: z.string(),
          found: z
            .enum(['matches', 'differs', 'cut', 'purged'])
            .describe(
              'matches: the chain holds it; differs: that event hashes otherwise now; cut: the chain ends before ' +
                'it; purged: it is past the retention, nothing is left to compare',
            ),
        })
        .optional()
        .describe('the head asked about (seq and hash), and what the chain holds of it'),
    })
    .describe("The audit trail's chain, checked")
    .register(opts.schemas, { id: 'AuditChainCheck' });
  app.get(
    `${opts.url}/verify`,
    {
      config: { roles: ['admin'] },
      schema: {
        tags: ['audit'],
        operationId: 'verifyAuditTrail',
        summary: 'Check that nobody rewrote the audit trail: the first broken link of its hash chain, if any',
        description:
          'Admins only. Every event carries the hash of the one before it, and its own (sha256 over its fields and ' +
          'that hash). Recomputes the chain from the anchor (the newest event purged past the retention) to the ' +
          'head, in one snapshot, and names the first event that was changed, moved, or follows a gap, or a head ' +
          'that is gone. With seq and hash (a head the service logged, `audit trail head`, kept outside the ' +
          'database): also that the chain still holds that event with that hash, which shows a chain recomputed ' +
          'from it on, or cut back before it, by whoever owns the table. Reads every event: a long trail takes seconds.',
        querystring: z.object({
          seq: z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional().describe("a kept head's seq"),
          hash: z
            .string()
            .length(64)
            .regex(/^[0-9a-fA-F]{64}$/)
            .optional()
            .describe("that head's hash: 64 hex digits (sha256), as logged"),
        }),
        response: { 200: checkSchema, ...Object.fromEntries([400, 401, 403].map((s) => [s, problemSchema])) },
      },
    },
    async (request) => {
      const { seq, hash } = request.query as { seq?: number; hash?: string };
      if ((seq === undefined) !== (hash === undefined)) {
        throw errors.validation('seq and hash go together: a head kept elsewhere is both', [
          { path: seq === undefined ? 'querystring.seq' : 'querystring.hash', message: 'required with the other' },
        ]);
      }
      const check = await verifyAuditChain(opts.db, seq === undefined ? undefined : { seq, hash: hash! });
      const log = check.intact ? request.log.info.bind(request.log) : request.log.error.bind(request.log);
      log({ audit_chain: check }, check.intact ? 'audit trail intact' : 'audit trail broken');
      return check;
    },
  );
}
