/**
 * `wallet balance|history|deposit|withdraw`: your token wallet at billing. Amounts are decimal strings from end to end
 * (never JS numbers); a request that moves tokens carries an idempotency key, so that the client's retries and a
 * repeat of the run with the same `--idempotency-key` are answered with the first request's answer.
 */
import { type BillingSchemas, unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { amount, context, count, idempotencyKey, oneOf, show, showRecord } from '../cli.ts';
import { feeShare } from '../format.ts';
import { everyPage } from '../paging.ts';

type Transaction = BillingSchemas['Transaction'];

const TRANSACTION_TYPES = ['deposit', 'withdrawal', 'payment', 'payout', 'fee', 'lock', 'release'] as const;
const TRANSACTION_STATUSES = ['pending', 'confirmed', 'failed'] as const;

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

export function walletCommands(program: Command) {
  const wallet = program.command('wallet').description('your token wallet');
  wallet
    .command('balance <wallet-id>')
    .description('what the wallet holds: total, available, locked by running sessions, pending')
    .action(async (walletId: string) => {
      const ctx = context(program);
      const b = unwrap(
        await ctx.billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: walletId } } }),
      );
      show(ctx.json, b, ['total', 'available', 'locked', 'pending'], [[b.total, b.available, b.locked, b.pending]]);
    });

  wallet
    .command('history <wallet-id>')
    .description("the wallet's transactions (its ledger), newest first: every page, or the first --limit")
    .option('--limit <n>', 'at most this many', count('--limit'))
    .option('--page-size <n>', 'how many one request asks for (1-1000)', count('--page-size'), 1000)
    .option('--type <type>', `only this type (repeatable): ${TRANSACTION_TYPES.join(', ')}`, oneOf(TRANSACTION_TYPES))
    .option(
      '--status <status>',
      `only this status (repeatable): ${TRANSACTION_STATUSES.join(', ')}`,
      oneOf(TRANSACTION_STATUSES),
    )
    .action(
      async (walletId: string, opts: { limit?: number; pageSize: number; type?: string[]; status?: string[] }) => {
        const ctx = context(program);
        const list = await everyPage(
          (cursor) =>
            ctx.billing.GET('/api/v1/wallet/{walletID}/transactions', {
              params: {
                path: { walletID: walletId },
                query: {
                  limit: Math.min(opts.limit ?? opts.pageSize, opts.pageSize),
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
    .command('deposit <wallet-id>')
    .description(
      'how to deposit: where to send the platform token from the wallet address; with --signature, credit a transfer ' +
        'sent (once it is final)',
    )
    .option('--signature <sig>', "the transfer's transaction signature: billing checks it on chain and credits it once")
    .option(
      '--amount <tokens>',
      'with --signature: the amount you sent (the transfer must have moved at least it)',
      amount('--amount'),
    )
    .action(async (walletId: string, opts: { signature?: string; amount?: string }) => {
      const ctx = context(program);
      if (opts.signature) {
        const credited = unwrap(
          await ctx.billing.POST('/api/v1/wallet/{walletID}/deposit', {
            params: {
              path: { walletID: walletId },
              // The client library's key for a claim: claiming one transfer again answers its first claim.
              header: { 'idempotency-key': `deposit:${opts.signature}` },
            },
            body: { signature: opts.signature, ...(opts.amount ? { amount: opts.amount } : {}) },
          }),
        );
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
      ]);
    });

  wallet
    .command('withdraw <wallet-id>')
    .description("send tokens on chain to the wallet's address or --to another")
    .requiredOption('--amount <tokens>', 'how much, a decimal amount such as 12.5', amount('--amount'))
    .option('--to <address>', "the owner address to pay (default: the wallet's address)")
    .option(
      '--idempotency-key <key>',
      'a key of yours for this withdrawal: the same command with the same key again never pays twice',
    )
    .action(async (walletId: string, opts: { amount: string; to?: string; idempotencyKey?: string }) => {
      const ctx = context(program);
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
