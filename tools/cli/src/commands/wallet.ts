/**
 * `wallet list|open|use|balance|history|deposit|withdraw`: your token wallets at billing (and, `balance --chain`, what
 * their addresses hold on chain). `open` opens yours at a
 * Solana address (proven with its keypair), `use` chooses the default wallet, which every command that takes a wallet
 * (and `rent`, `run`, `jobs submit`) acts on when given none. Amounts are decimal strings from end to end (never JS
 * numbers); a request that moves tokens carries an idempotency key, so that the client's retries and a repeat of the
 * run with the same `--idempotency-key` are answered with the first request's answer.
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { amount, type Context, context, count, idempotencyKey, oneOf, show, showRecord, UsageError } from '../cli.ts';
import { updateConfig } from '../config.ts';
import { feeShare } from '../format.ts';
import { claimTransfer, depositFrom, loadKeypair, provenWith } from '../keypair-wallet.ts';
import { everyPage, pageRequest } from '../paging.ts';
import { chainRpcUrl } from '../platform-url.ts';
import { chooseWallet, defaultWhenNone, heldWallets, ownWalletAt } from '../wallet-choice.ts';

type Transaction = BillingSchemas['Transaction'];
type Wallet = BillingSchemas['Wallet'];

const TRANSACTION_TYPES = ['deposit', 'withdrawal', 'payment', 'payout', 'fee', 'lock', 'release'] as const;
const TRANSACTION_STATUSES = ['pending', 'confirmed', 'failed'] as const;
/** The optional argument of a command that acts on one wallet. */
const WALLET_ARG = '[wallet-id]';
const WALLET_ARG_HELP = 'the wallet (default: the default one, gpu wallet use)';

/** A transaction billing answered, as one record. */
export function showTransaction(json: boolean, t: Transaction) {
  showRecord(json, t, [
    ['id', t.id],
    ['type', t.type],
    ['status', t.status],
    ['amount', t.amount],
    ['fee', t.fee],
    ['destination', t.destination],
    ['signature', t.signature],
    ['failure', t.failure_reason],
    ['created', t.created_at],
  ]);
}

/** A wallet as one record, `note` saying what was done to it. */
function showWallet(ctx: Context, w: Wallet, note: string) {
  showRecord(ctx.json, w, [
    ['id', w.id],
    ['address', w.solana_address],
    ['address proven', w.address_proven_at ?? 'no (deposits need it: gpu wallet open --keypair FILE)'],
    ['created', w.created_at],
    ['', note],
  ]);
}

/** Whose a wallet is, in words: yours, or the provider wallet of a machine of yours. */
const kindOf = (w: Wallet) => (w.owner_type === 'user' ? 'yours' : `machine ${w.owner_id}`);

function openCommands(program: Command, wallet: Command) {
  wallet
    .command('list')
    .description("your wallets: your own and your machines' (provider wallets); * marks the default")
    .action(async () => {
      const ctx = context(program);
      const list = await heldWallets(ctx);
      show(
        ctx.json,
        list,
        ['', 'id', 'whose', 'address', 'proven', 'created'],
        list.map((w) => [
          w.id === ctx.config.wallet ? '*' : '',
          w.id,
          kindOf(w),
          w.solana_address,
          w.address_proven_at ? 'yes' : 'no',
          w.created_at,
        ]),
      );
      if (!ctx.json && list.length === 0) process.stderr.write('no wallet yet: gpu wallet open --keypair FILE\n');
    });

  wallet
    .command('open')
    .description(
      'open your wallet at a Solana address of yours (deposits come from it, withdrawals go to it): with --keypair ' +
        "the keypair's address, proven by its signature (deposits need it); again with the same address, nothing " +
        'new. Your first becomes the default wallet',
    )
    .option('--keypair <file>', "a Solana keypair file (solana-keygen's): its address, proven")
    .option('--address <address>', 'the address alone, not proven (open it again with --keypair to prove it)')
    .action(async (opts: { keypair?: string; address?: string }) => {
      const ctx = context(program);
      if (Boolean(opts.keypair) === Boolean(opts.address)) throw new UsageError('give --keypair <file> or --address');
      const keypair = opts.keypair ? await loadKeypair(opts.keypair) : undefined;
      const { wallet: found, opened } = await ownWalletAt(ctx, keypair?.publicKey.toBase58() ?? opts.address!);
      const w = keypair ? await provenWith(ctx, found, keypair) : found;
      const made = defaultWhenNone(ctx, w.id);
      showWallet(ctx, w, `${opened ? 'opened' : 'already open'}${made ? '; now the default wallet' : ''}`);
    });

  wallet
    .command('use <wallet-id>')
    .description('make a wallet of yours the default: the one that pays when a command names none')
    .action(async (walletId: string) => {
      const ctx = context(program);
      const w = unwrap(
        await ctx.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: walletId } } }),
      );
      updateConfig(ctx.env, { wallet: w.id });
      showWallet(ctx, w, 'now the default wallet');
    });
}

export function walletCommands(program: Command) {
  const wallet = program.command('wallet').description('your token wallets');
  openCommands(program, wallet);
  wallet
    .command('balance')
    .argument(WALLET_ARG, WALLET_ARG_HELP)
    .description(
      'what the wallet holds: total, available, locked by running sessions, pending; with --chain also the tokens ' +
        'its Solana address holds on chain (what deposits come from, withdrawals go to), read by billing',
    )
    .option('--address <address>', 'the wallet of yours at this Solana address')
    .option('--chain', "also the platform token held on chain at the wallet's address")
    .action(async (given: string | undefined, opts: { address?: string; chain?: boolean }) => {
      const ctx = context(program);
      const walletId = await chooseWallet(ctx, { id: given, address: opts.address });
      const path = { params: { path: { walletID: walletId } } };
      const [b, chain] = await Promise.all([
        ctx.billing.GET('/api/v1/wallet/{walletID}/balance', path).then(unwrap),
        opts.chain ? ctx.billing.GET('/api/v1/wallet/{walletID}/chain-balance', path).then(unwrap) : undefined,
      ]);
      if (!chain) {
        show(ctx.json, b, ['total', 'available', 'locked', 'pending'], [[b.total, b.available, b.locked, b.pending]]);
        return;
      }
      show(
        ctx.json,
        { ...b, chain },
        ['total', 'available', 'locked', 'pending', 'on chain', 'address'],
        [[b.total, b.available, b.locked, b.pending, chain.token_balance, chain.solana_address]],
      );
    });

  wallet
    .command('history')
    .argument(WALLET_ARG, WALLET_ARG_HELP)
    .description("the wallet's transactions (its ledger), newest first: every page, or the first --limit")
    .option('--limit <n>', 'at most this many', count('--limit'))
    .option('--page-size <n>', 'how many one request asks for (1-1000)', count('--page-size', 1000), 1000)
    .option('--type <type>', `only this type (repeatable): ${TRANSACTION_TYPES.join(', ')}`, oneOf(TRANSACTION_TYPES))
    .option(
      '--status <status>',
      `only this status (repeatable): ${TRANSACTION_STATUSES.join(', ')}`,
      oneOf(TRANSACTION_STATUSES),
    )
    .action(
      async (
        given: string | undefined,
        opts: { limit?: number; pageSize: number; type?: string[]; status?: string[] },
      ) => {
        const ctx = context(program);
        const walletId = await chooseWallet(ctx, { id: given });
        const list = await everyPage(
          (cursor) =>
            ctx.billing.GET('/api/v1/wallet/{walletID}/transactions', {
              params: {
                path: { walletID: walletId },
                query: {
                  limit: pageRequest(opts),
                  ...(cursor ? { cursor } : {}),
                  ...(opts.type ? { type: opts.type as Transaction['type'][] } : {}),
                  ...(opts.status ? { status: opts.status as Transaction['status'][] } : {}),
                },
              },
            }),
          opts.limit,
        );
        show(
          ctx.json,
          list,
          // The fee is part of the amount (the platform's share of a payment), never charged on top of it.
          ['time', 'type', 'status', 'amount', "of it the platform's", 'reference', 'signature'],
          list.map((t) => [
            t.created_at,
            t.type,
            t.status,
            t.amount,
            feeShare(t.amount, t.fee),
            t.reference,
            t.signature,
          ]),
        );
      },
    );

  wallet
    .command('deposit')
    .argument(WALLET_ARG, WALLET_ARG_HELP)
    .description(
      'how to deposit: where to send the platform token from the wallet address; with --keypair, send --amount ' +
        'from it and have it credited (into your wallet at its address, opened and proven if need be); with ' +
        '--signature, credit a transfer sent (once it is final)',
    )
    .option('--keypair <file>', "send from this Solana keypair file (its address must be the wallet's)")
    .option('--rpc <url>', "with --keypair: the chain's JSON-RPC (default SOLANA_RPC_URL, else pnpm start's)")
    .option('--signature <sig>', "the transfer's transaction signature: billing checks it on chain and credits it once")
    .option(
      '--amount <tokens>',
      'with --keypair: how much to send; with --signature: the amount you sent (the transfer moved at least it)',
      amount('--amount'),
    )
    .option('--address <address>', 'the wallet of yours at this Solana address')
    .action(async (given: string | undefined, opts: DepositOptions) => {
      const ctx = context(program);
      if (opts.keypair && opts.signature)
        throw new UsageError('--keypair sends a deposit, --signature claims one: not both');
      if (opts.rpc && !opts.keypair) throw new UsageError('--rpc is the chain --keypair sends through: give --keypair');
      if (opts.amount && !opts.keypair && !opts.signature) {
        throw new UsageError('--amount is what --keypair sends or what --signature claims: give one of them');
      }
      if (opts.keypair) return sendDeposit(ctx, given, opts);
      const walletId = await chooseWallet(ctx, { id: given, address: opts.address });
      if (opts.signature) {
        const credited = await claimTransfer(ctx, { walletId, signature: opts.signature, amount: opts.amount });
        showTransaction(ctx.json, credited);
        return;
      }
      const [w, how] = await Promise.all([
        ctx.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: walletId } } }).then(unwrap),
        ctx.billing.GET('/api/v1/deposits/instructions').then(unwrap),
      ]);
      const proven = w.address_proven_at !== null;
      showRecord(ctx.json, { wallet_id: w.id, from: w.solana_address, address_proven: proven, ...how }, [
        ['send from', `${w.solana_address ?? '(none)'}${proven ? '' : ' (not proven yet: deposits need it proven)'}`],
        ['send to', how.treasury_token_account],
        ['token (mint)', how.mint],
        ['decimals', how.decimals],
        ['token program', how.token_program],
        ['final at', how.commitment],
        ['then', `gpu wallet deposit ${w.id} --signature <transaction signature>`],
        ['or', `gpu wallet deposit ${w.id} --keypair <file> --amount <tokens>`],
      ]);
    });

  wallet
    .command('withdraw')
    .argument(WALLET_ARG, WALLET_ARG_HELP)
    .description(
      "send tokens on chain to the wallet's address or --to another (to an address without a token account yet: " +
        'the amount less the token account fee, shown as fee)',
    )
    .requiredOption('--amount <tokens>', 'how much, a decimal amount such as 12.5', amount('--amount'))
    .option('--to <address>', "the owner address to pay (default: the wallet's address)")
    .option(
      '--idempotency-key <key>',
      'a key of yours for this withdrawal: the same command with the same key again never pays twice',
    )
    .action(async (given: string | undefined, opts: { amount: string; to?: string; idempotencyKey?: string }) => {
      const ctx = context(program);
      const walletId = await chooseWallet(ctx, { id: given });
      const key = idempotencyKey('withdraw', opts.idempotencyKey);
      const sent = unwrap(
        await ctx.billing.POST('/api/v1/wallet/{walletID}/withdraw', {
          params: { path: { walletID: walletId }, header: { 'idempotency-key': key } },
          body: { amount: opts.amount, ...(opts.to ? { destination: opts.to } : {}) },
        }),
      );
      showTransaction(ctx.json, sent);
      if (!ctx.json && sent.status === 'pending') {
        process.stderr.write(`sent, not yet confirmed: gpu wallet history ${walletId} shows when it is\n`);
      }
    });
}

interface DepositOptions {
  keypair?: string;
  rpc?: string;
  signature?: string;
  amount?: string;
  address?: string;
}

/** `deposit --keypair`: tokens sent from the keypair to the treasury, credited to the wallet at its address. */
async function sendDeposit(ctx: Context, given: string | undefined, opts: DepositOptions) {
  if (!opts.amount) throw new UsageError('--keypair sends --amount tokens: give --amount');
  if (opts.address) throw new UsageError('--keypair names the wallet by its address: drop --address');
  const keypair = await loadKeypair(opts.keypair!);
  const address = keypair.publicKey.toBase58();
  let w: Wallet;
  if (given) {
    w = unwrap(await ctx.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: given } } }));
    if (w.solana_address !== address) {
      throw new Error(`wallet ${w.id} is at ${w.solana_address ?? 'no address'}, not the keypair's ${address}`);
    }
  } else {
    w = (await ownWalletAt(ctx, address)).wallet;
    defaultWhenNone(ctx, w.id);
  }
  w = await provenWith(ctx, w, keypair);
  const sent = await depositFrom(ctx, {
    walletId: w.id,
    keypair,
    amount: opts.amount,
    rpcUrl: chainRpcUrl(opts.rpc, ctx.env),
  });
  showRecord(ctx.json, sent, [
    ['wallet', w.id],
    ['signature', sent.signature],
    ['transaction', sent.transaction.id],
    ['amount', sent.transaction.amount],
    ['status', sent.transaction.status],
  ]);
}
