/** Provider operations: earnings summary, payouts of earnings on chain and the automatic payout setting. */
import { type App, callerOf, withRequestLogger } from '@gpu/common';
import { z } from 'zod';
import { Dec, walletBalances } from '../domain/ledger/index.ts';
import {
  autoPayoutSetting,
  earningsSummary,
  findTransaction,
  providerAccount,
  setAutoPayout,
  startChainPayout,
} from '../domain/wallets/index.ts';
import { billingErrors } from '../errors.ts';
import { autoPayoutJson, earningsJson } from '../wire/presenters.ts';
import { EARNINGS_ROLES, PROVIDER_ROLES } from './access.ts';
import { requestAmount } from './amounts.ts';
import { payoutAnswer } from './answers.ts';
import type { RouteDeps } from './deps.ts';
import { keyClaim, replayable, runIdempotent } from './idempotent.ts';
import {
  idempotencyHeaders,
  positiveAmount,
  problems,
  providerParams,
  schemas,
  solanaAddress,
  transactionSchema,
} from './schemas.ts';

/** How every route keyed by a provider ID answers those who may not use its account. */
const OWNER_FIRST =
  "Anyone but the machine's owner (and, for reads, the owner's daemon), an admin or a service gets 403 " +
  'NOT_PROVIDER_OWNER before anything else, whether or not the machine has a wallet; 404 WALLET_NOT_FOUND only ' +
  'tells its owner that it has none yet, 404 PROVIDER_NOT_FOUND that the registry does not know the machine.';

const earningsSchema = z
  .object({
    provider_id: z.uuid(),
    wallet_id: z.uuid(),
    total_earned: z.string(),
    total_paid_out: z.string(),
    pending_payouts: z.string(),
    available_for_payout: z.string(),
    locked: z.string(),
    minimum_payout: z.string(),
  })
  .register(schemas, { id: 'ProviderEarnings' });

const autoPayoutSchema = z
  .object({
    provider_id: z.uuid(),
    wallet_id: z.uuid(),
    auto_payout: z.boolean(),
    destination: z.string().nullable().describe('where earnings are paid automatically; null when off'),
    minimum_payout: z.string(),
    last_failure: z
      .string()
      .nullable()
      .describe(
        'why the last automatic payout failed (say, a refused destination); null after a success or a new setting',
      ),
    next_attempt_at: z
      .string()
      .nullable()
      .describe('when a failed automatic payout is tried again (the backoff doubles from a minute to a day)'),
  })
  .register(schemas, { id: 'PayoutSettings' });

const payoutSettingsBody = z
  .object({
    auto_payout: z.boolean(),
    destination: solanaAddress.optional().describe("owner address to pay; the wallet's address by default"),
  })
  .register(schemas, { id: 'PayoutSettingsUpdate' });

const payoutBody = z
  .object({
    amount: positiveAmount.optional(),
    destination: solanaAddress.optional().describe("owner address to pay; the wallet's address by default"),
  })
  .prefault({})
  .register(schemas, { id: 'PayoutRequest' });

export async function providerRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  const resume = async (transactionId: string) => {
    const row = await findTransaction(ctx.db, transactionId);
    return row && row.status !== 'pending' ? payoutAnswer(ctx.scale, row) : null;
  };

  app.get(
    '/api/v1/provider/:providerID/earnings',
    {
      config: { scope: 'machines', roles: EARNINGS_ROLES },
      schema: {
        tags: ['providers'],
        operationId: 'getProviderEarnings',
        summary: "A provider's earnings: earned, paid out, pending payouts and what can be paid out now",
        description: OWNER_FIRST,
        params: providerParams,
        response: {
          200: earningsSchema,
          ...problems(400, 403, 404, 503),
        },
      },
    },
    async (request) => {
      const wallet = await providerAccount(
        ctx,
        callerOf(request),
        request.params.providerID,
        'read',
        request.correlationId,
      );
      return earningsJson(await earningsSummary(ctx.db, wallet, ctx.scale, ctx.minimumPayout));
    },
  );

  app.get(
    '/api/v1/provider/:providerID/payout-settings',
    {
      config: { scope: 'machines', roles: EARNINGS_ROLES },
      schema: {
        tags: ['providers'],
        operationId: 'getPayoutSettings',
        summary: "A provider's automatic payout setting",
        description: OWNER_FIRST,
        params: providerParams,
        response: { 200: autoPayoutSchema, ...problems(400, 403, 404, 503) },
      },
    },
    async (request) =>
      autoPayoutJson(await autoPayoutSetting(ctx, callerOf(request), request.params.providerID, request.correlationId)),
  );

  app.put(
    '/api/v1/provider/:providerID/payout-settings',
    {
      config: {
        scope: 'money:out',
        verifiedEmail: 'payouts',
        roles: PROVIDER_ROLES,
        audit: { action: 'payout_settings_changed', body: ['auto_payout', 'destination'] },
      },
      schema: {
        tags: ['providers'],
        operationId: 'setPayoutSettings',
        summary: 'Turn automatic payouts on or off',
        description:
          "With `auto_payout: true`, the provider's available earnings are paid on chain to `destination` (the " +
          "wallet's address by default) as soon as a session on the machine ends and they reach " +
          '`billing.minimum_payout`; earnings already due are paid at once. 400 DESTINATION_REQUIRED when the ' +
          'wallet has no address and none is named, INVALID_DESTINATION for a program, sysvar, token account, burn ' +
          "address or one of the platform's own addresses (treasury, its token account, the mint, its authorities); " +
          "403 DESTINATION_NOT_ALLOWED when anyone but the holder (an admin, a service) names another address than the wallet's; 503 " +
          'SOLANA_NOT_CONFIGURED without a chain. With a registry, the wallet of a machine that has none yet is ' +
          'opened for its owner. ' +
          OWNER_FIRST,
        params: providerParams,
        body: payoutSettingsBody,
        response: { 200: autoPayoutSchema, ...problems(400, 403, 404, 502, 503) },
      },
    },
    async (request) =>
      autoPayoutJson(
        await setAutoPayout(withRequestLogger(ctx, request), callerOf(request), request.params.providerID, {
          enabled: request.body.auto_payout,
          destination: request.body.destination,
          correlationId: request.correlationId,
        }),
      ),
  );

  app.post(
    '/api/v1/provider/:providerID/payout',
    {
      config: {
        scope: 'money:out',
        verifiedEmail: 'payouts',
        roles: PROVIDER_ROLES,
        audit: { action: 'payout', body: ['amount', 'destination'] },
        openapi: replayable(200, 202),
      },
      schema: {
        tags: ['providers'],
        operationId: 'createProviderPayout',
        summary: "Pay a provider's earnings out on chain (at least the minimum payout)",
        description:
          'Without an amount the whole available balance is paid out. Same crash-safe path as withdrawals: 200 ' +
          'confirmed, 202 pending, 502 SOLANA_TRANSACTION_FAILED (reversed). 400 PAYOUT_BELOW_MINIMUM when the ' +
          'amount is under `billing.minimum_payout` (default 10 tokens); 402 INSUFFICIENT_FUNDS when it is more ' +
          'than the available balance, or, without an amount, when the available balance is under the minimum. ' +
          "400 INVALID_DESTINATION (nothing debited) for a destination that cannot own the tokens or is the platform's " +
          'own. To an address without a token account yet, the amount less the token account fee is sent (the ' +
          "record's `fee`; 400 INVALID_TRANSFER when nothing would be left). 403 DESTINATION_NOT_ALLOWED when " +
          "anyone but the machine's owner (an admin, a service) names another address than the wallet's. " +
          OWNER_FIRST,
        params: providerParams,
        headers: idempotencyHeaders,
        body: payoutBody,
        response: { 200: transactionSchema, 202: transactionSchema, ...problems(400, 402, 403, 404, 409, 502, 503) },
      },
    },
    async (request, reply) =>
      runIdempotent(request, reply, { db: ctx.db, resume }, async (idem) => {
        const wallet = await providerAccount(
          ctx,
          callerOf(request),
          request.params.providerID,
          'manage',
          request.correlationId,
        );
        const minimum = new Dec(ctx.minimumPayout);
        let amount: Dec;
        if (request.body.amount !== undefined) {
          amount = requestAmount(request.body.amount, ctx.scale);
        } else {
          const balances = await walletBalances(ctx.db, wallet.id, ctx.scale);
          amount = new Dec(balances?.available ?? 0);
          if (amount.lt(minimum)) {
            throw billingErrors.insufficientFunds(wallet.id, amount.toFixed(ctx.scale), minimum.toFixed(ctx.scale));
          }
        }
        if (amount.lt(minimum))
          throw billingErrors.payoutBelowMinimum(amount.toFixed(ctx.scale), minimum.toFixed(ctx.scale));
        const settled = await startChainPayout(
          withRequestLogger(ctx, request),
          {
            wallet,
            type: 'payout',
            amount,
            destination: request.body.destination,
            correlationId: request.correlationId,
            actor: callerOf(request),
          },
          keyClaim(idem, (row) => payoutAnswer(ctx.scale, row)),
        );
        return payoutAnswer(ctx.scale, settled);
      }),
  );
}
