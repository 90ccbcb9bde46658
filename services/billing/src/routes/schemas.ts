/** Zod schemas shared by the billing routes (request parts and response bodies). */
import { PAGE_HEADERS, problemSchema, type RouteDocs, schemaRegistry } from '@gpu/common';
import { z } from 'zod';
import { isSolanaAddress, SOLANA_ADDRESS_PATTERN } from '../domain/chain/index.ts';

/**
 * The billing document's named schemas (`components.schemas`): every request and response body is one, registered
 * with `.register(schemas, { id })` beside its definition.
 */
export const schemas = schemaRegistry();

/** How a page of a list reads in the document: its paging headers (README "Paging"). */
export const PAGE_DOCS: RouteDocs = { headers: { 200: PAGE_HEADERS } };

export const amountString = z
  .string()
  .max(64)
  .regex(/^(0|[1-9]\d{0,29})(\.\d+)?$/, 'must be a decimal string like "12.5"')
  .describe('token amount as a decimal string');

/** The token's decimals unless `chain.token_decimals` says otherwise (the documents state the default). */
const DEFAULT_TOKEN_DECIMALS = 6;

/**
 * An amount a caller moves (a withdrawal, a payout, a deposit's claim, a session's cap): above zero, and at most the
 * token's decimals, which the route checks (`requestAmount`: a 400 naming the field) and the document states
 * (`pattern`, and `x-max-decimals` for the default decimals).
 */
export const positiveAmount = amountString
  .regex(/^(?!0+(?:\.0+)?$)/, 'the amount must be greater than zero')
  .meta({ 'x-max-decimals': DEFAULT_TOKEN_DECIMALS })
  .describe(
    `token amount as a decimal string, above zero, with at most the token's decimals (${DEFAULT_TOKEN_DECIMALS} by default)`,
  );

/**
 * A Solana address: base58 of exactly 32 bytes, canonical. The document states the text (`pattern`) and the bytes
 * (`x-base58-bytes: 32`, which JSON Schema cannot state: base58 of 32 bytes may be 32 to 44 characters, and not every
 * such text decodes to 32).
 */
export const solanaAddress = z
  .string()
  .max(44)
  .regex(SOLANA_ADDRESS_PATTERN, 'must be a base58 Solana address (32 bytes)')
  .refine(isSolanaAddress, {
    message: 'must be a base58 Solana address (32 bytes)',
    when: (payload) => (payload.issues ?? []).length === 0,
  })
  .meta({ 'x-base58-bytes': 32 })
  .describe('base58 Solana address');

/**
 * A list query parameter of allowed values: `type=a&type=b` and `type=a,b` alike; `aliases` name groups of values
 * (`running` for `active` and `grace_period`). The document shows an array of the allowed values (aliases included),
 * which is how a client sends it (`type=a&type=b`); an unknown value is a 400 naming the parameter.
 */
export const csv = <V extends string>(
  item: z.ZodEnum<{ [K in V]: K }>,
  aliases: Record<string, readonly NoInfer<V>[]> = {},
) => {
  const allowed = z.enum([...item.options, ...Object.keys(aliases)] as [string, ...string[]]);
  return z
    .preprocess(
      (v) =>
        // An empty value (`type=`) is no allowed value: refused, as the document's enum says.
        typeof v === 'string' || Array.isArray(v)
          ? [v].flat().flatMap((s) => (typeof s === 'string' ? s.split(',') : [s]))
          : v,
      z.array(allowed).max(32),
    )
    .transform((xs) => [...new Set(xs.flatMap((x): readonly string[] => aliases[x] ?? [x]))] as V[])
    .optional();
};

export const walletParams = z.object({ walletID: z.uuid().describe('wallet ID') });
export const providerParams = z.object({ providerID: z.uuid().describe('provider ID') });

export const idempotencyHeaders = z.object({
  'idempotency-key': z
    .string()
    .min(1)
    .max(255)
    .regex(/^[\x21-\x7e]+$/, 'visible ASCII only')
    .optional()
    .describe('makes the request safe to retry: the first answer is replayed for the same key and parameters'),
});

export const transactionSchema = z
  .object({
    id: z.uuid(),
    wallet_id: z.uuid(),
    type: z.enum(['deposit', 'withdrawal', 'payment', 'payout', 'fee', 'lock', 'release']),
    status: z.enum(['pending', 'confirmed', 'failed']),
    amount: z.string(),
    fee: z
      .string()
      .describe(
        "a payment's platform fee; a withdrawal's or payout's token account fee, withheld from amount (the rest sent) " +
          'when the destination had no token account as its transfer was built (the transfer creates it); 0 once failed',
      ),
    signature: z.string().nullable(),
    destination: z.string().nullable(),
    failure_reason: z.string().nullable(),
    hold_id: z.string().nullable(),
    reference: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    confirmed_at: z.string().nullable(),
  })
  .register(schemas, { id: 'Transaction' });

export const balanceSchema = z
  .object({
    wallet_id: z.uuid(),
    total: z.string().describe('available + locked'),
    available: z.string(),
    locked: z.string().describe('held for running sessions'),
    pending: z.string().describe('withdrawals and payouts sent but not yet confirmed'),
    decimals: z.number().int(),
  })
  .register(schemas, { id: 'WalletBalance' });

export const walletSchema = z
  .object({
    id: z.uuid(),
    owner_type: z.enum(['user', 'provider']),
    owner_id: z.uuid(),
    holder_id: z
      .uuid()
      .nullable()
      .describe("the user who holds the wallet: a user wallet's owner, a provider machine's owner (null: not known)"),
    solana_address: z
      .string()
      .nullable()
      .describe('null only for a provider wallet opened on first need (payouts then name a destination)'),
    address_proven_at: z
      .string()
      .nullable()
      .describe('when the holder proved control of the address (null: not yet; deposits need it)'),
    created_at: z.string(),
  })
  .register(schemas, { id: 'Wallet' });

/** Error responses every route may give, for the OpenAPI document. */
export const problems = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((s) => [s, problemSchema])) as Record<number, typeof problemSchema>;
