/**
 * Proof of reserves at an admin's demand (the treasury's balance on chain against what the ledger owes), and the
 * pause of withdrawals and payouts: paused by a check that finds a gap, or by an operator; resumed by an operator.
 */
import { type App, callerOf } from '@gpu/common';
import { z } from 'zod';
import { checkReserves, type PayoutPause, pausePayouts, resumePayouts } from '../domain/reserves/index.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';

const amount = z.string().describe('tokens, decimal string');

const payoutPauseSchema = z
  .object({
    since: z.string().describe('when withdrawals and payouts were paused'),
    cause: z
      .enum(['reserve_shortfall', 'operator'])
      .describe('reserve_shortfall: a reserve check found the treasury short of what the ledger owes'),
    reason: z.string().nullable().describe("why, in words: the operator's, or what the check found"),
    paused_by: z.string().nullable().describe("the operator's ID; null for the reserve check"),
    details: z.record(z.string(), z.unknown()).describe("the check's figures: gap, required, treasury_balance, ratio"),
  })
  .describe('Withdrawals and payouts are paused: every one is refused with 503 PAYOUTS_PAUSED until resumed')
  .register(schemas, { id: 'PayoutPause' });

const reserveReportSchema = z
  .object({
    checked_at: z.string(),
    treasury: z.string().describe("the treasury's address"),
    treasury_balance: amount.describe("the treasury's balance of the platform token, read from the chain now"),
    treasury_sol: z
      .string()
      .nullable()
      .describe(
        "the treasury's SOL (decimal string), read from the chain now: it pays every transfer's fee and the rent of " +
          'each token account a transfer creates; withdrawals and payouts fail on chain without it. Null when it ' +
          'could not be read (that stops no payout)',
      ),
    owed: z
      .object({
        available: amount,
        locked: amount,
        pending_out: amount,
        platform_fees: amount,
        total: amount,
      })
      .describe("what the ledger owes: every wallet's available, locked and pending-out tokens, and the fees"),
    in_flight: amount.describe('withdrawals and payouts debited and not yet settled (pending_out)'),
    in_flight_unsent: amount.describe(
      "the part of in_flight that has not left the treasury (not landed at the commitment, or a landed one's token " +
        'account fee): it must still hold it',
    ),
    required: amount.describe('what the treasury must hold at least: owed less what has left of in_flight'),
    ratio: z.string().nullable().describe('treasury_balance / required (6 decimals); null when nothing is required'),
    covered: z.boolean(),
    gap: amount.describe('what the treasury lacks (0 when covered)'),
    payouts_paused: payoutPauseSchema.nullable().describe('null while withdrawals and payouts are open'),
  })
  .describe('A proof of reserves')
  .register(schemas, { id: 'ReserveReport' });

const pauseBody = z
  .object({
    reason: z
      .string()
      .max(500)
      .regex(/\S/, 'not blank')
      .transform((r) => r.trim())
      .describe('why, for the audit trail (not blank)'),
  })
  .register(schemas, { id: 'PayoutPauseRequest' });

const resumedSchema = z
  .object({ ended: payoutPauseSchema.nullable().describe('the pause that ended; null when none was in force') })
  .register(schemas, { id: 'PayoutsResumed' });

const pauseJson = (p: PayoutPause) => ({
  since: p.since.toISOString(),
  cause: p.cause,
  reason: p.reason,
  paused_by: p.by,
  details: p.details,
});

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
          'Admins only. Reads the ledger and the chain now (billing also checks every ' +
          'billing.reserve_check_interval, and before each withdrawal and payout) and updates the billing_reserve_* ' +
          'metrics at once. covered: false names the gap, is logged as an error and, found again on a second read, ' +
          'pauses withdrawals and payouts (payouts_paused) until an operator resumes them. 503 ' +
          'SOLANA_NOT_CONFIGURED without a chain, SOLANA_UNAVAILABLE when it cannot be read.',
        response: { 200: reserveReportSchema, ...problems(401, 403, 503) },
      },
    },
    async () => {
      const { report, pause } = await checkReserves(ctx);
      return { ...report, payouts_paused: pause && pauseJson(pause) };
    },
  );

  app.post(
    '/api/v1/billing/reserves/pause',
    {
      // No `requested` event first: a pause moves nothing, and must not wait for the trail's lock.
      config: { roles: ['admin'], audit: { action: 'payouts_paused', body: ['reason'], ahead: false } },
      schema: {
        tags: ['payments'],
        operationId: 'pausePayouts',
        summary: 'Pause every withdrawal and payout (asked for and automatic) until an operator resumes them',
        description:
          'Admins only; in the audit trail with who and why. Paused, each is refused with 503 PAYOUTS_PAUSED before ' +
          'anything is debited; those already sent are settled as always. Answers the pause in force (an earlier ' +
          'one stays as it was). A reserve check that finds the treasury short pauses them the same way.',
        body: pauseBody,
        response: { 200: payoutPauseSchema, ...problems(400, 401, 403) },
      },
    },
    async (request) => pauseJson(await pausePayouts(ctx, callerOf(request), request.body.reason)),
  );

  app.post(
    '/api/v1/billing/reserves/resume',
    {
      config: { roles: ['admin'], audit: { action: 'payouts_resumed', body: ['reason'] } },
      schema: {
        tags: ['payments'],
        operationId: 'resumePayouts',
        summary: 'Resume withdrawals and payouts once the treasury covers what the ledger owes',
        description:
          'Admins only; in the audit trail with who and why. Checks the reserves first: 409 RESERVES_NOT_COVERED ' +
          '(with the gap) while the treasury is still short, and the pause stays. Answers the pause that ended ' +
          '(null when none was in force). 503 SOLANA_NOT_CONFIGURED without a chain.',
        body: pauseBody,
        response: { 200: resumedSchema, ...problems(400, 401, 403, 409, 503) },
      },
    },
    async (request) => {
      const ended = await resumePayouts(ctx, callerOf(request), request.body.reason);
      return { ended: ended && pauseJson(ended) };
    },
  );
}
