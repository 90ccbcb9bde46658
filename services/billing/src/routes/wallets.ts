/** Wallet routes: create a wallet, read its balance and its transaction history. */
import { type App, afterCursor, callerOf, pageQuery, setNextPage, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import { ChainUnavailable, chainError } from '../domain/chain/index.ts';
import { Dec, formatAmount, walletBalances } from '../domain/ledger/index.ts';
import {
  heldWallets,
  issueAddressChallenge,
  listTransactions,
  openWallet,
  proveAddress,
  walletFor,
} from '../domain/wallets/index.ts';
import { billingErrors } from '../errors.ts';
import { transactionJson, walletJson } from '../wire/presenters.ts';
import { WALLET_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import {
  balanceSchema,
  csv,
  PAGE_DOCS,
  problems,
  schemas,
  solanaAddress,
  transactionSchema,
  walletParams,
  walletSchema,
} from './schemas.ts';

const typeList = z.enum(['deposit', 'withdrawal', 'payment', 'payout', 'fee', 'lock', 'release']);
const statusList = z.enum(['pending', 'confirmed', 'failed']);

const newWalletBody = z
  .object({
    owner_type: z.enum(['user', 'provider']),
    owner_id: z.uuid(),
    solana_address: solanaAddress,
    holder_id: z.uuid().optional().describe('the holding user (admins and services only)'),
  })
  .register(schemas, { id: 'NewWallet' });

const addressChallengeSchema = z
  .object({
    wallet_id: z.uuid(),
    solana_address: z.string(),
    message: z.string().describe('the exact text to sign'),
    expires_at: z.string(),
  })
  .register(schemas, { id: 'AddressChallenge' });

const addressProofBody = z
  .object({
    signature: z
      .string()
      .max(90)
      .regex(/^[1-9A-HJ-NP-Za-km-z]{64,90}$/, 'must be a base58 ed25519 signature (64 bytes)')
      .describe("base58 of the address key's ed25519 signature of the challenge message"),
  })
  .register(schemas, { id: 'AddressProof' });

const chainBalanceSchema = z
  .object({
    wallet_id: z.uuid(),
    solana_address: z.string(),
    mint: z.string(),
    token_balance: z
      .string()
      .describe('tokens, decimal string with the token\'s decimals; "0.000000" when the address has no token account'),
    decimals: z.number().int(),
  })
  .register(schemas, { id: 'ChainBalance' });

const walletListSchema = z
  .array(walletSchema)
  .describe('Wallets, oldest first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'WalletList' });

const transactionListSchema = z
  .array(transactionSchema)
  .describe('Transactions, newest first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'TransactionList' });

export async function walletRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  const { db, scale } = ctx;

  app.post(
    '/api/v1/wallet',
    {
      config: { roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'createWallet',
        summary: 'Create a wallet for a user or provider (one per owner and type)',
        description:
          'A user opens their own user wallet (`owner_id` = their user ID). A provider wallet (`owner_id` = the ' +
          "registry's machine ID) is opened by the machine's owner: billing asks the provider registry who that is " +
          '(404 PROVIDER_NOT_FOUND when it does not know the machine, 503 PROVIDER_REGISTRY_UNAVAILABLE when it ' +
          'cannot be asked). Admins and services open any wallet and may name its `holder_id` themselves. ' +
          'Someone else: 403 NOT_WALLET_HOLDER / NOT_PROVIDER_OWNER. The address is where withdrawals and payouts ' +
          "go by default: 400 INVALID_DESTINATION for one of the platform's own addresses, a well-known program or " +
          'a burn address.',
        body: newWalletBody,
        response: { 201: walletSchema, ...problems(400, 403, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const wallet = await openWallet(ctx, callerOf(request), {
        ownerType: request.body.owner_type,
        ownerId: request.body.owner_id,
        solanaAddress: request.body.solana_address,
        holderId: request.body.holder_id,
        correlationId: request.correlationId,
      });
      return reply.code(201).send(walletJson(wallet));
    },
  );

  app.get(
    '/api/v1/wallet',
    {
      config: { scope: 'wallet:read', roles: WALLET_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['wallets'],
        operationId: 'listWallets',
        summary: "The caller's wallets: their user wallet and their machines' provider wallets, oldest first",
        description:
          'The wallets the calling user holds (a machine client holds none: an empty list). When more follow, the ' +
          'answer carries `X-Next-Cursor` and a `Link` to the next page (rel="next"); pass it back as `cursor`. ' +
          '400 INVALID_CURSOR for a cursor not from this list.',
        querystring: z.object(pageQuery),
        response: { 200: walletListSchema, ...problems(400, 403) },
      },
    },
    async (request, reply) => {
      const page = await heldWallets(ctx, callerOf(request), {
        limit: request.query.limit,
        after: afterCursor(request.query.cursor),
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map(walletJson);
    },
  );

  app.get(
    '/api/v1/wallet/:walletID',
    {
      config: { scope: 'wallet:read', roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'getWallet',
        summary: 'Get a wallet',
        params: walletParams,
        response: { 200: walletSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) => walletJson(await walletFor(ctx, callerOf(request), request.params.walletID)),
  );

  app.post(
    '/api/v1/wallet/:walletID/address-challenge',
    {
      config: { roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'createAddressChallenge',
        summary: "Ask for a one-time message to sign with the wallet address's key (proving the address)",
        description:
          'Deposits are credited only to a wallet whose holder proved control of its Solana address: sign this ' +
          "`message` (its UTF-8 bytes, ed25519, as a Solana wallet's sign-message does) with the address's key and " +
          'send the signature to POST /wallet/{id}/address-proof before `expires_at` (10 minutes). A new challenge ' +
          'replaces an older one.',
        params: walletParams,
        response: {
          201: addressChallengeSchema,
          ...problems(400, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const c = await issueAddressChallenge(ctx, callerOf(request), request.params.walletID);
      return reply.code(201).send({
        wallet_id: c.walletId,
        solana_address: c.solanaAddress,
        message: c.message,
        expires_at: c.expiresAt.toISOString(),
      });
    },
  );

  app.post(
    '/api/v1/wallet/:walletID/address-proof',
    {
      config: { roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'proveWalletAddress',
        summary: "Prove control of the wallet's Solana address with its signature of the challenge",
        description:
          '200: the wallet, `address_proven_at` set (again 200 once proven). 409 NO_ADDRESS_CHALLENGE when no ' +
          'challenge is pending (used or expired: ask again); 422 ADDRESS_PROOF_INVALID when the signature is not ' +
          "the address's signature of the pending challenge.",
        params: walletParams,
        body: addressProofBody,
        response: { 200: walletSchema, ...problems(400, 403, 404, 409, 422) },
      },
    },
    async (request) =>
      walletJson(await proveAddress(ctx, callerOf(request), request.params.walletID, request.body.signature)),
  );

  app.get(
    '/api/v1/wallet/:walletID/balance',
    {
      config: { scope: 'wallet:read', roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'getWalletBalance',
        summary: 'Get the balance of a wallet: total = available + locked; pending is on its way out',
        params: walletParams,
        response: { 200: balanceSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) => {
      const wallet = await walletFor(ctx, callerOf(request), request.params.walletID);
      const balances = await walletBalances(db, wallet.id, scale);
      return { wallet_id: wallet.id, ...balances!, decimals: scale };
    },
  );

  app.get(
    '/api/v1/wallet/:walletID/chain-balance',
    {
      config: { scope: 'wallet:read', roles: WALLET_ROLES },
      schema: {
        tags: ['wallets'],
        operationId: 'getWalletChainBalance',
        summary:
          "Read the platform-token balance of the wallet's Solana address on chain (its associated token account)",
        params: walletParams,
        response: {
          200: chainBalanceSchema,
          ...problems(400, 403, 404, 409, 503),
        },
      },
    },
    async (request) => {
      const wallet = await walletFor(ctx, callerOf(request), request.params.walletID);
      const chain = deps.billing.chain;
      if (!chain) throw billingErrors.chainNotConfigured();
      const address = wallet.solanaAddress;
      if (!address) throw billingErrors.noWalletAddress(wallet.id);
      try {
        return {
          wallet_id: wallet.id,
          solana_address: address,
          mint: chain.mintAddress(),
          // Padded to the token's decimals, like every other amount.
          token_balance: formatAmount(new Dec(await chain.tokenBalance(address)), chain.decimals()),
          decimals: chain.decimals(),
        };
      } catch (err) {
        throw err instanceof ChainUnavailable ? chainError(err) : err;
      }
    },
  );

  app.get(
    '/api/v1/wallet/:walletID/transactions',
    {
      config: { scope: 'wallet:read', roles: WALLET_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['wallets'],
        operationId: 'listWalletTransactions',
        summary: 'Transaction history of a wallet, newest first, with filters and cursor pagination',
        description:
          'When more transactions follow, the answer carries `X-Next-Cursor` and a `Link` to the next page ' +
          '(rel="next"); pass it back as `cursor`. 400 INVALID_CURSOR for a cursor not from this list.',
        params: walletParams,
        querystring: z.object({
          ...pageQuery,
          type: csv(typeList).describe('one or more types (repeat the parameter or separate with commas)'),
          status: csv(statusList).describe('one or more statuses'),
          from: zTimestamp().optional().describe('created at or after (RFC 3339, 1970 to 2100)'),
          to: zTimestamp().optional().describe('created before (RFC 3339, 1970 to 2100)'),
        }),
        response: {
          200: transactionListSchema,
          ...problems(400, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const wallet = await walletFor(ctx, callerOf(request), request.params.walletID);
      const q = request.query;
      const page = await listTransactions(db, wallet.id, {
        limit: q.limit,
        after: afterCursor(q.cursor),
        type: q.type,
        status: q.status,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map((r) => transactionJson(r, scale));
    },
  );
}
