/**
 * Which wallet a command acts on: the ID given, else (`--address`) the caller's wallet at that Solana address, else
 * the default kept in the configuration (`gpu wallet use`, or set by the first `gpu wallet open`). And the caller's
 * own wallet at an address, opened when they have none: a user has one, so an address other than its own is refused,
 * never answered with the wallet of another address.
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import { readConfig, updateConfig } from './config.ts';
import { everyPage } from './paging.ts';

type Wallet = BillingSchemas['Wallet'];

const CHOOSE_ONE =
  'gpu wallet list shows yours; gpu wallet use <id> makes one the default (gpu wallet open does for your first)';

/** Every wallet the caller holds: their own and their machines', oldest first. */
export function heldWallets(ctx: Context): Promise<Wallet[]> {
  return everyPage((cursor) =>
    ctx.billing.GET('/api/v1/wallet', { params: { query: { limit: 1000, ...(cursor ? { cursor } : {}) } } }),
  );
}

/** The caller's wallet at `address`, or one line saying there is none. */
async function walletAt(ctx: Context, address: string): Promise<Wallet> {
  const found = (await heldWallets(ctx)).find((w) => w.solana_address === address);
  if (!found) {
    throw new Error(`no wallet of yours is at ${address} (gpu wallet open --address ${address} opens yours there)`);
  }
  return found;
}

/** The wallet named by its ID, else by `address`, else the default; a usage error when none is. */
export async function chooseWallet(ctx: Context, given: { id?: string; address?: string }): Promise<string> {
  if (given.id && given.address) throw new UsageError('a wallet ID or --address, not both');
  if (given.id) return given.id;
  if (given.address) return (await walletAt(ctx, given.address)).id;
  return payingWallet(ctx, undefined);
}

/** The `--wallet` given, else the default (`rent`, `run`, `jobs submit`); a usage error when there is neither. */
export function payingWallet(ctx: Context, given: string | undefined): string {
  const id = given ?? ctx.config.wallet;
  if (!id) throw new UsageError(`which wallet? none given and no default: ${CHOOSE_ONE}`);
  return id;
}

/** Makes `id` the default wallet when there is none yet; whether it did. */
export function defaultWhenNone(ctx: Context, id: string): boolean {
  if (readConfig(ctx.env).wallet) return false;
  updateConfig(ctx.env, { wallet: id });
  return true;
}

/** The caller's user wallet at `address`: opened now when they have none, refused when theirs is at another one. */
export async function ownWalletAt(ctx: Context, address: string): Promise<{ wallet: Wallet; opened: boolean }> {
  const me = unwrap(await ctx.auth.GET('/api/v1/auth/me'));
  const made = await ctx.billing.POST('/api/v1/wallet', {
    body: { owner_type: 'user', owner_id: me.id, solana_address: address },
  });
  const problem = made.error as { code?: string; wallet_id?: string } | undefined;
  if (problem?.code !== 'WALLET_ALREADY_EXISTS' || !problem.wallet_id) return { wallet: unwrap(made), opened: true };
  const wallet = unwrap(
    await ctx.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: problem.wallet_id } } }),
  );
  if (wallet.solana_address !== address) {
    throw new Error(
      `your wallet ${wallet.id} is at ${wallet.solana_address ?? 'no address'}, not ${address}: a user has one ` +
        'wallet, and its address is where deposits come from',
    );
  }
  return { wallet, opened: false };
}
