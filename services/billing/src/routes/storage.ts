/** Stored bytes, billed: the storage service's usage reports, and each user's storage charges. */
import { type App, afterCursor, callerOf, pageQuery, setNextPage, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import { chargeStorage, storageCharges, storageUsageSchema, toStorageUsageReport } from '../domain/storage/index.ts';
import { storageChargeJson } from '../wire/presenters.ts';
import { STORAGE_READ_ROLES, STORAGE_REPORT_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { PAGE_DOCS, problems, schemas } from './schemas.ts';

const storageChargeSchema = z
  .object({
    id: z.uuid(),
    user_id: z.uuid(),
    wallet_id: z.uuid().nullable().describe("the user's wallet charged; null when the user has none"),
    period_start: z.string(),
    period_end: z.string(),
    bytes: z.number().int().describe('bytes the user stored, as the storage service measured them in the period'),
    gb_hours: z.string().describe('bytes / 2^30 × the period in hours (shown to 12 decimals)'),
    rate_per_gb_hour: z.string().describe('`pricing.storage_rate_per_gb_hour` when the period was charged'),
    cost: z.string().describe('GB-hours × rate, rounded once (half-even) to the token scale'),
    charged: z.string().describe("what was taken from the wallet's available balance (at most all of it)"),
    unpaid: z.string().describe('cost - charged: what the balance could not pay'),
    transaction_id: z.uuid().nullable().describe('the payment in the wallet history; null when nothing was charged'),
    created_at: z.string(),
  })
  .register(schemas, { id: 'StorageCharge' });

const storageUsageBody = storageUsageSchema.register(schemas, { id: 'StorageUsageReport' });

const storageChargeListSchema = z
  .array(storageChargeSchema)
  .describe('Storage charges, newest period first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'StorageChargeList' });

export async function storageRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;

  app.post(
    '/api/v1/billing/storage-usage',
    {
      config: { roles: STORAGE_REPORT_ROLES },
      schema: {
        tags: ['storage'],
        operationId: 'reportStorageUsage',
        summary: "Charge a user's stored bytes over one period (the storage service)",
        description:
          'GB-hours (bytes / 2^30 × hours) at `pricing.storage_rate_per_gb_hour`, rounded once to the token scale, ' +
          "taken from the user's available balance (never more than it holds: the rest is `unpaid`) to the " +
          "platform's revenue, in one transaction. 201 with the charge; a period charged before (the same start " +
          'and end: a retry, another storage instance) answers 200 with the first charge, whatever bytes this ' +
          'report says; 409 STORAGE_PERIOD_OVERLAPS for a period overlapping another charged one. Only platform ' +
          'services and admins.',
        body: storageUsageBody,
        response: { 201: storageChargeSchema, 200: storageChargeSchema, ...problems(400, 403, 409) },
      },
    },
    async (request, reply) => {
      const { charge, created } = await chargeStorage(ctx, callerOf(request), toStorageUsageReport(request.body));
      return reply.code(created ? 201 : 200).send(storageChargeJson(charge, ctx.scale));
    },
  );

  app.get(
    '/api/v1/billing/storage-usage',
    {
      config: { scope: 'wallet:read', roles: STORAGE_READ_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['storage'],
        operationId: 'listStorageCharges',
        summary: 'Storage charges, newest period first: what was stored, what it cost, what was paid',
        description:
          "A user reads their own (another user's `user_id` is 403 NOT_WALLET_HOLDER); admins and services read " +
          "anyone's, everyone's without `user_id`. Paging as everywhere: a JSON array, the next page in " +
          '`X-Next-Cursor` and `Link` rel="next".',
        querystring: z.object({
          user_id: z.uuid().optional(),
          from: zTimestamp().optional().describe('periods starting at or after (RFC 3339, 1970 to 2100)'),
          to: zTimestamp().optional().describe('periods starting before (RFC 3339, 1970 to 2100)'),
          ...pageQuery,
        }),
        response: { 200: storageChargeListSchema, ...problems(400, 403) },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const page = await storageCharges(ctx.db, callerOf(request), {
        userId: q.user_id,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
        limit: q.limit,
        after: afterCursor(q.cursor),
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map((c) => storageChargeJson(c, ctx.scale));
    },
  );
}
