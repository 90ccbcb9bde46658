/**
 * A wallet with a Solana keypair file (as `solana-keygen new` writes it): its address proven by signing billing's
 * challenge (deposits are credited only from a proven address), and deposits sent from it: an SPL transferChecked to
 * the treasury, awaited until final, then claimed (`@gpu/client/solana`, loaded by these commands alone: the chain's
 * libraries are large).
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import type { Context } from './cli.ts';
import { problemOf, ShownFailure } from './problems.ts';

type Solana = typeof import('@gpu/client/solana');
type Keypair = ReturnType<Solana['readKeypair']>;
type Wallet = BillingSchemas['Wallet'];
type Transaction = BillingSchemas['Transaction'];

const solana = (): Promise<Solana> => import('@gpu/client/solana');

/** The keypair of a file, or one line saying why it cannot be read. */
export async function loadKeypair(file: string): Promise<Keypair> {
  const { readKeypair } = await solana();
  try {
    return readKeypair(file);
  } catch (err) {
    throw new Error(`cannot read the keypair ${file}: ${(err as Error).message}`);
  }
}

/** The wallet, its address proven with the keypair's signature (once: a proven one is left as it is). */
export async function provenWith(ctx: Context, wallet: Wallet, keypair: Keypair): Promise<Wallet> {
  if (wallet.address_proven_at) return wallet;
  await (await solana()).proveAddress(ctx.billing, wallet.id, keypair);
  return unwrap(await ctx.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: wallet.id } } }));
}

/**
 * Sends `amount` tokens from the keypair to the treasury over the chain at `rpcUrl` and has billing credit them to
 * the wallet. A transfer sent but not credited (billing refused the claim, or the chain did not confirm it in time) is
 * one line with its signature and the command that claims it later, exit status 1; with --json one JSON object on
 * standard error, `{status, code, detail, hint, signature, wallet_id, amount}`, so that a script can claim it.
 */
export async function depositFrom(
  ctx: Context,
  opts: { walletId: string; keypair: Keypair; amount: string; rpcUrl: string },
): Promise<{ signature: string; transaction: { id: string; amount: string; status: string } }> {
  const { deposit, DepositClaimError } = await solana();
  try {
    return await deposit({ billing: ctx.billing, ...opts });
  } catch (err) {
    if (!(err instanceof DepositClaimError)) throw err;
    const claimed = err.stage === 'claim';
    // Billing's refusal of the claim, or the chain's failure to confirm (said naming the chain, not the platform).
    const why = problemOf(err.cause, claimed ? ctx.url : `the chain at ${opts.rpcUrl}`, 'none');
    const sent = `sent ${err.amount} tokens to the treasury (signature ${err.signature})`;
    throw new ShownFailure({
      ...why,
      code: claimed ? why.code : 'TRANSFER_NOT_CONFIRMED',
      detail: claimed
        ? `${sent} but billing did not credit them: ${why.detail}`
        : `${sent} but the chain did not confirm the transfer in time: ${why.detail}`,
      hint:
        `the tokens are not lost: ${claimed ? '' : 'once the transfer lands, '}claim them with gpu wallet deposit ` +
        `${err.walletId} --signature ${err.signature} --amount ${err.amount} --url ${ctx.url}`,
      signature: err.signature,
      wallet_id: err.walletId,
      amount: err.amount,
    });
  }
}

/**
 * Has billing credit a transfer already sent, as the client library claims one: the amount in billing's form (so that
 * "3" claims again what "3.000000" did), a transfer not final yet claimed again for a minute.
 */
export async function claimTransfer(
  ctx: Context,
  opts: { walletId: string; signature: string; amount?: string },
): Promise<Transaction> {
  const { claimDeposit } = await solana();
  // The library names the fields it needs; the record is billing's whole transaction.
  return (await claimDeposit({ billing: ctx.billing, ...opts })).transaction as Transaction;
}
