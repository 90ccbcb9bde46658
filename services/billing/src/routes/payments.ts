/** Money in and out of a wallet: deposits (claimed by signature) and withdrawals. */
import { type App, callerOf, withRequestLogger } from '@gpu/common';
import { z } from 'zod';
import { claimDeposit, findTransaction, startChainPayout, walletFor } from '../domain/wallets/index.ts';
import { billingErrors } from '../errors.ts';
import { WALLET_ROLES } from './access.ts';
import { requestAmount } from './amounts.ts';
import { depositAnswer, payoutAnswer } from './answers.ts';
import type { RouteDeps } from './deps.ts';
import { keyClaim, replayable, runIdempotent } from './idempotent.ts';
import {
  idempotencyHeaders,
  positiveAmount,
  problems,
  schemas,
  solanaAddress,
  transactionSchema,
  walletParams,
} from './schemas.ts';

const signature = z
  .string()
  .max(88)
  .regex(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/, 'must be a base58 transaction signature')
  .describe('signature of the on-chain token transfer to the treasury');

const depositInstructionsSchema = z
  .object({
    mint: z.string(),
    decimals: z.number().int(),
    token_program: z.string(),
    treasury: z.string().describe("the treasury's owner address"),
    treasury_token_account: z.string().describe('where deposits go'),
    commitment: z.enum(['processed', 'confirmed', 'finalized']),
  })
  .register(schemas, { id: 'DepositInstructions' });

const depositBody = z
  .object({
    signature,
    amount: positiveAmount.optional().describe('claimed amount: the transfer must have moved at least this'),
  })
  .register(schemas, { id: 'DepositClaim' });

const withdrawalBody = z
  .object({
    amount: positiveAmount,
    destination: solanaAddress.optional().describe("owner address to pay; the wallet's address by default"),
  })
  .register(schemas, { id: 'WithdrawalRequest' });

export async function paymentRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  const resume = async (transactionId: string) => {
    const row = await findTransaction(ctx.db, transactionId);
    return row && row.status !== 'pending' ? payoutAnswer(ctx.scale, row) : null;
  };

  app.get(
    '/api/v1/deposits/instructions',
    {
      config: { public: true },
      schema: {
        tags: ['payments'],
        operationId: 'getDepositInstructions',
        summary: 'Where and how to send a deposit: the platform mint and the treasury token account',
        description:
          'A deposit is a `transferChecked` of the platform mint (with its decimals) from the token account of ' +
          "the wallet's proven address to `treasury_token_account`, then `POST /wallet/{id}/deposit` with its " +
          'signature once final at `commitment`. Public: it names only public addresses. 503 ' +
          'SOLANA_NOT_CONFIGURED without a chain.',
        response: {
          200: depositInstructionsSchema,
          ...problems(503),
        },
      },
    },
    async () => {
      const chain = ctx.chain;
      if (!chain) throw billingErrors.chainNotConfigured();
      return {
        mint: chain.mintAddress(),
        decimals: chain.decimals(),
        token_program: chain.tokenProgramAddress(),
        treasury: chain.treasuryAddress(),
        treasury_token_account: chain.treasuryTokenAccount(),
        commitment: ctx.commitment,
      };
    },
  );

  app.post(
    '/api/v1/wallet/:walletID/deposit',
    {
      config: {
        roles: WALLET_ROLES,
        audit: { action: 'deposit', body: ['signature', 'amount'] },
        openapi: replayable(201),
      },
      schema: {
        tags: ['payments'],
        operationId: 'claimDeposit',
        summary: 'Credit a deposit: verify the token transfer on chain by its signature and credit it once',
        description:
          "The transfer must move platform tokens from the wallet's registered address into the treasury and be " +
          'final at the configured commitment. Exactly the verified amount is credited; a signature is credited ' +
          'at most once across all wallets (409 DEPOSIT_ALREADY_CREDITED). Rejections: 404 ' +
          'DEPOSIT_TRANSACTION_NOT_FOUND, 409 DEPOSIT_NOT_FINAL (retry later), 422 DEPOSIT_TRANSACTION_FAILED, ' +
          'DEPOSIT_WRONG_MINT, DEPOSIT_WRONG_RECIPIENT, DEPOSIT_WRONG_SOURCE, DEPOSIT_AMOUNT_TOO_LOW; 409 ' +
          'ADDRESS_NOT_PROVEN until the holder proved control of the wallet address (address-challenge, then ' +
          'address-proof).',
        params: walletParams,
        headers: idempotencyHeaders,
        body: depositBody,
        response: { 201: transactionSchema, ...problems(400, 403, 404, 409, 422, 503) },
      },
    },
    async (request, reply) =>
      runIdempotent(request, reply, { db: ctx.db }, async (idem) => {
        const amount = request.body.amount ? requestAmount(request.body.amount, ctx.scale) : undefined;
        const answer = depositAnswer(ctx.scale);
        const deposit = await claimDeposit(
          ctx,
          {
            walletId: request.params.walletID,
            signature: request.body.signature,
            amount,
            correlationId: request.correlationId,
            actor: callerOf(request),
          },
          keyClaim(idem, answer),
        );
        return answer(deposit);
      }),
  );

  app.post(
    '/api/v1/wallet/:walletID/withdraw',
    {
      config: {
        scope: 'money:out',
        verifiedEmail: 'withdrawals',
        roles: WALLET_ROLES,
        audit: { action: 'withdrawal', body: ['amount', 'destination'] },
        openapi: replayable(200, 202),
      },
      schema: {
        tags: ['payments'],
        operationId: 'withdrawFromWallet',
        summary: "Withdraw tokens to the wallet's address (or another destination) on chain",
        description:
          'The amount is debited first and recorded with the signed transaction before it is sent. 200: confirmed ' +
          'at the configured commitment; 202: sent but not yet confirmed (settled by reconciliation); 502 ' +
          'SOLANA_TRANSACTION_FAILED: the transfer failed and the debit was reversed. 400 INVALID_DESTINATION, ' +
          'nothing debited or sent, for a destination (or wallet address) that cannot own the tokens (a program, ' +
          "sysvar, token account or burn address) or that the platform itself controls (the treasury, the treasury's " +
          "token account, the mint, the mint's authorities): `reason` says which. To an address without a token " +
          "account yet, the transfer creates it and sends the amount less the token account fee (the record's " +
          '`fee`); 400 INVALID_TRANSFER when the amount does not exceed that fee. 403 DESTINATION_NOT_ALLOWED when ' +
          "anyone but the wallet's holder (an admin, a service) names another address than the wallet's. " +
          '429 RATE_LIMITED (Retry-After), ' +
          'nothing debited, once the wallet made its withdrawals of the hour (billing.withdrawals_per_hour).',
        params: walletParams,
        headers: idempotencyHeaders,
        body: withdrawalBody,
        response: {
          200: transactionSchema,
          202: transactionSchema,
          ...problems(400, 402, 403, 404, 409, 429, 502, 503),
        },
      },
    },
    async (request, reply) =>
      runIdempotent(request, reply, { db: ctx.db, resume }, async (idem) => {
        const amount = requestAmount(request.body.amount, ctx.scale);
        const wallet = await walletFor(ctx, callerOf(request), request.params.walletID);
        // A provider's earnings leave through its payouts, which keep the minimum payout.
        if (wallet.ownerType === 'provider') throw billingErrors.useProviderPayout(wallet.ownerId);
        const settled = await startChainPayout(
          withRequestLogger(ctx, request),
          {
            wallet,
            type: 'withdrawal',
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
