/** Proof of reserves at an admin's demand: the treasury's balance on chain against what the ledger owes. */
import type { App } from '@gpu/common';
import { z } from 'zod';
import { checkReserves } from '../domain/wallets/index.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';

const amount = z.string().describe('tokens, decimal string');

const reserveReportSchema = z
  .object({
    checked_at: z.string(),
    treasury: z.string().describe("the treasury's address"),
    treasury_balance: amount.describe("the treasury's balance of the platform token, read from the chain now"),
    owed: z
      .object({
        available: amount,
        locked: amount,
        pending_out: amount,
        platform_fees: amount,
        total: amount,
      })
      .describe("what the ledger owes: every wallet's available, locked and pending-out tokens, and the fees"),
    in_flight: amount.describe('withdrawals and payouts sent or being sent: they may have left the treasury already'),
    required: amount.describe('what the treasury must hold at least: owed less in flight'),
    ratio: z.string().nullable().describe('treasury_balance / required (6 decimals); null when nothing is required'),
    covered: z.boolean(),
    gap: amount.describe('what the treasury lacks (0 when covered)'),
  })
  .describe('A proof of reserves')
  .register(schemas, { id: 'ReserveReport' });

export async function reserveRoutes(app: App, { billing: ctx }: RouteDeps) {
  app.get(
    '/api/v1/billing/reserves',
    {
      config: { roles: ['admin'] },
      schema: {
        tags: ['payments'],
        operationId: 'checkReserves',
        summary: "Check now that the treasury's tokens on chain cover what the ledger owes",
        description:
          'Admins only. Reads the chain and the ledger now (billing also checks every billing.reserve_check_interval, ' +
          'as the billing_reserve_* metrics). covered: false names the gap, and is logged as an error. 503 ' +
          'SOLANA_NOT_CONFIGURED without a chain.',
        response: { 200: reserveReportSchema, ...problems(401, 403, 503) },
      },
    },
    async () => checkReserves(ctx),
  );
}
