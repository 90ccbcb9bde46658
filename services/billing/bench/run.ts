/**
 * `pnpm bench billing`: ledger transfers per second through the service's
 * transfer path, on one hot wallet and spread over 10,000 wallets, beside the
 * same SQL sent directly with `pg`; the ledger invariants are checked after.
 *  - transfers: lock/release pairs (`available -> locked`, then back), each a
 *    `postTransfers` call (one atomic `ledger_post` statement);
 *  - grouped transfers: the same pairs, each transfer a `postTransferGroup`
 *    call (group commit: concurrent groups share one `ledger_post_groups`
 *    statement and one commit);
 *  - holds: `createHold` / `voidHold` pairs, each a database transaction that
 *    also writes the hold row and its lock/release transaction record.
 * Writes the `billing` section of docs/benchmarks.md, then runs the usage
 * benchmark (bench/usage.ts); `pnpm bench billing usage` runs only that one.
 * BENCH_ONLY=1 prints the section instead of writing it (as every benchmark);
 * BENCH_PATHS=grouped runs only the lines whose name contains that text (and
 * not the usage benchmark); BENCH_WALLETS sets how many wallets the ledger holds (10,000).
 */
import { randomUUID } from 'node:crypto';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { createTestDatabase } from '@gpu/common/testing';
import { sql } from 'kysely';
import pg from 'pg';
import { billingConfigSchema } from '../src/config.ts';
import { openBillingDatabase } from '../src/db/open.ts';
import { newBillingState } from '../src/domain/context.ts';
import { postTransferGroup, transferGroupStats } from '../src/domain/ledger/group-commit.ts';
import { createHold, voidHold } from '../src/domain/ledger/holds.ts';
import { postTransfers, type TransferSpec } from '../src/domain/ledger/ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { checkLedgerInvariant } from './ledger-invariant.ts';

if (process.argv[2] === 'usage') {
  await import('./usage.ts');
  process.exit(0);
}

/** Wallets the spread lines pick from (three ledger accounts each); BENCH_WALLETS sizes the ledger for a cost curve. */
const WALLETS = Number(process.env.BENCH_WALLETS ?? 10_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const ROUNDS = 4;
const TARGET_SPREAD = 1000;
/** Issue #18: grouped spread transfers at 3x the ungrouped spread rate recorded before group commit (2778/s). */
const RECORDED_UNGROUPED_SPREAD = 2778;
const GROUPED_FACTOR = 3;

const testDb = await createTestDatabase('billing_bench');
const config = billingConfigSchema.parse({ database: { url: testDb.url, pool_size: CONCURRENCY } });
const database = await openBillingDatabase(config);
const db = database.db;

console.log(`creating ${WALLETS} wallets and funding them through the ledger`);
await sql`INSERT INTO wallets (id, owner_type, owner_id, solana_address)
  SELECT gen_random_uuid(), 'user', gen_random_uuid(), '11111111111111111111111111111111'
    FROM generate_series(1, ${WALLETS})`.execute(db);
await sql`INSERT INTO ledger_accounts (id, wallet_id, kind, non_negative)
  SELECT gen_random_uuid(), w.id, k.kind, true
    FROM wallets w CROSS JOIN (VALUES ('available'), ('locked'), ('pending_out')) k(kind)`.execute(db);
// The service's paths use the (wallet, kind) -> account ID cache a billing context owns (warmed by the funding).
const state = newBillingState();
const { accountIds } = state;
const walletIds = (await db.selectFrom('wallets').select('id').execute()).map((w) => w.id);
for (let i = 0; i < walletIds.length; i += 500) {
  await postTransfers(
    db,
    walletIds.slice(i, i + 500).map((id) => ({
      debit: { system: 'chain_incoming' as const },
      credit: { wallet: id, kind: 'available' as const },
      amount: new Dec('1000'),
      code: 'deposit',
    })),
    accountIds,
  );
}
await sql`ANALYZE`.execute(db); // as autovacuum would have done on a live database
const hot = walletIds[0]!;
// The direct path knows the account IDs up front, as the service's (wallet, kind) -> ID cache does.
const accounts = new Map(
  (await db.selectFrom('ledger_accounts').select(['id', 'wallet_id', 'kind']).execute()).map((a) => [
    `${a.wallet_id}:${a.kind}`,
    a.id,
  ]),
);
const pick = (spread: boolean) => (spread ? walletIds[Math.floor(Math.random() * walletIds.length)]! : hot);
const half = new Dec('0.5');

const serviceTransfers = (spread: boolean) => async () => {
  const w = pick(spread);
  await postTransfers(
    db,
    [{ debit: { wallet: w, kind: 'available' }, credit: { wallet: w, kind: 'locked' }, amount: half, code: 'lock' }],
    accountIds,
  );
  await postTransfers(
    db,
    [{ debit: { wallet: w, kind: 'locked' }, credit: { wallet: w, kind: 'available' }, amount: half, code: 'release' }],
    accountIds,
  );
};

// The same pairs through group commit: each transfer a group of its own, posted with the groups of other workers.
const ledger = { db, state };
const lockPair = (w: string): [TransferSpec, TransferSpec] => [
  { debit: { wallet: w, kind: 'available' }, credit: { wallet: w, kind: 'locked' }, amount: half, code: 'lock' },
  { debit: { wallet: w, kind: 'locked' }, credit: { wallet: w, kind: 'available' }, amount: half, code: 'release' },
];
const groupedTransfers = (spread: boolean) => async () => {
  const [lock, release] = lockPair(pick(spread));
  await postTransferGroup(ledger, [lock]);
  await postTransferGroup(ledger, [release]);
};

const serviceHolds = (spread: boolean) => async () => {
  const w = pick(spread);
  const hold = await db
    .transaction()
    .execute((trx) => createHold(trx, w, half, 'bench', { now: new Date(), accountIds }));
  await db.transaction().execute((trx) => voidHold(trx, hold.id, { now: new Date(), accountIds }));
};

// The same statements, straight through pg.
const pool = new pg.Pool({ connectionString: testDb.url, max: CONCURRENCY });
const POST = 'SELECT ledger_post($1::uuid[], $2, $3, $4::numeric[], $5, $6::uuid[], $7::uuid[], $8::uuid[])';
const postArgs = (w: string, from: string, to: string, code: string, txId: string | null, holdId: string | null) => [
  [randomUUID()],
  [accounts.get(`${w}:${from}`)],
  [accounts.get(`${w}:${to}`)],
  ['0.5'],
  [code],
  [txId],
  [holdId],
  [null],
];

const directTransfers = (spread: boolean) => async () => {
  const w = pick(spread);
  await pool.query(POST, postArgs(w, 'available', 'locked', 'lock', null, null));
  await pool.query(POST, postArgs(w, 'locked', 'available', 'release', null, null));
};

const RECORD = `INSERT INTO transactions (id, wallet_id, type, status, amount, hold_id, reference, confirmed_at, created_at, updated_at)
  VALUES ($1, $2, $3, 'confirmed', '0.5', $4, 'bench', now(), now(), now())`;
async function inTransaction(fn: (c: pg.PoolClient) => Promise<void>) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await fn(c);
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}
const directHolds = (spread: boolean) => async () => {
  const w = pick(spread);
  const holdId = randomUUID();
  const lockTx = randomUUID();
  await inTransaction(async (c) => {
    await c.query(POST, postArgs(w, 'available', 'locked', 'hold', lockTx, holdId));
    await c.query(
      `WITH lock_record AS (${RECORD})
       INSERT INTO holds (id, wallet_id, status, amount, reference) VALUES ($4, $2, 'pending', '0.5', 'bench')`,
      [lockTx, w, 'lock', holdId],
    );
  });
  const releaseTx = randomUUID();
  await inTransaction(async (c) => {
    await c.query('SELECT * FROM holds WHERE id = $1 FOR UPDATE', [holdId]);
    await c.query(POST, postArgs(w, 'locked', 'available', 'hold_void', releaseTx, holdId));
    await c.query(
      `WITH step_records AS (${RECORD})
       UPDATE holds SET amount = amount + 0, posted = posted + 0, released = released + 0.5, status = 'voided',
              updated_at = now() WHERE id = $4 RETURNING *`,
      [releaseTx, w, 'release', holdId],
    );
  });
};

const cpuSeconds = new Map<string, number>();
const batchesOf = new Map<string, number>();

/** Runs `pair` (two transfers) from CONCURRENCY workers for `seconds`. */
async function measure(name: string, pair: () => Promise<void>, seconds: number) {
  const deadline = Date.now() + seconds * 1000;
  let pairs = 0;
  let errors = 0;
  const started = Date.now();
  const cpu = process.cpuUsage();
  const batchesBefore = transferGroupStats(ledger).batches;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < deadline) {
        try {
          await pair();
          pairs++;
        } catch (err) {
          errors++;
          if (errors < 3) console.error(err);
        }
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  cpuSeconds.set(name, (cpuSeconds.get(name) ?? 0) + (used.user + used.system) / 1e6);
  batchesOf.set(name, (batchesOf.get(name) ?? 0) + transferGroupStats(ledger).batches - batchesBefore);
  return { seconds: (Date.now() - started) / 1000, transfers: pairs * 2, errors };
}

// The machine may be shared: the paths take turns in short rounds so that background load falls on all alike.
const paths = (
  [
    ['transfers, service, hot', serviceTransfers(false)],
    ['transfers, service, grouped, hot', groupedTransfers(false)],
    ['transfers, pg direct, hot', directTransfers(false)],
    ['transfers, service, spread', serviceTransfers(true)],
    ['transfers, service, grouped, spread', groupedTransfers(true)],
    ['transfers, pg direct, spread', directTransfers(true)],
    ['holds, service, hot', serviceHolds(false)],
    ['holds, pg direct, hot', directHolds(false)],
    ['holds, service, spread', serviceHolds(true)],
    ['holds, pg direct, spread', directHolds(true)],
  ] as const
).filter(([name]) => !process.env.BENCH_PATHS || name.includes(process.env.BENCH_PATHS));
const totals = new Map<string, { transfers: number; errors: number; seconds: number }>();
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, fn] of paths) {
    const r = await measure(name, fn, SECONDS / ROUNDS);
    const t = totals.get(name) ?? { transfers: 0, errors: 0, seconds: 0 };
    totals.set(name, {
      transfers: t.transfers + r.transfers,
      errors: t.errors + r.errors,
      seconds: t.seconds + r.seconds,
    });
  }
}
const rows: string[] = [];
const rateOf = (name: string) => {
  const t = totals.get(name);
  return t ? t.transfers / t.seconds : Number.NaN;
};
const met = (ok: boolean) => (ok ? 'met' : 'NOT met');
/** The target a line is judged by, if any, and whether it was met. */
function targetOf(name: string, rate: number): string {
  if (name === 'transfers, service, spread') return ` (target ≥ ${TARGET_SPREAD}: ${met(rate >= TARGET_SPREAD)})`;
  if (name === 'transfers, service, grouped, spread') {
    const floor = GROUPED_FACTOR * RECORDED_UNGROUPED_SPREAD;
    const here = GROUPED_FACTOR * rateOf('transfers, service, spread');
    return ` (target ≥ ${floor}: ${met(rate >= floor)}; ≥ ${GROUPED_FACTOR} × ungrouped spread here, ${Math.round(here)}: ${met(rate >= here)})`;
  }
  if (name === 'transfers, service, grouped, hot') {
    const here = rateOf('transfers, service, hot');
    return ` (target ≥ ungrouped hot here, ${Math.round(here)}: ${met(rate >= here)})`;
  }
  return '';
}
const grouping: string[] = [];
for (const [name, t] of totals) {
  const rate = t.transfers / t.seconds;
  const cpuMs = (1000 * (cpuSeconds.get(name) ?? 0)) / t.transfers;
  const target = targetOf(name, rate);
  const batches = batchesOf.get(name) ?? 0;
  if (batches > 0) grouping.push(`${name}: ${(t.transfers / batches).toFixed(1)} groups per statement`);
  rows.push(`| ${name} | ${Math.round(rate)}${target} | ${t.transfers} | ${t.errors} | ${cpuMs.toFixed(2)} |`);
  console.log(rows.at(-1));
}

const c = await checkLedgerInvariant(db);
const transfers = await sql<{ n: number }>`SELECT count(*) AS n FROM ledger_transfers`.execute(db);
const intact = c.intact;

const md = `## billing

${machineLine()}

Ledger transfers per second, ${CONCURRENCY} concurrent workers, ${SECONDS} s per line in ${ROUNDS} interleaved
rounds, PostgreSQL on loopback (the test server: fsync off). **transfers**: lock/release pairs
(\`available → locked\`, then back) through \`postTransfers\`, the path every money movement takes: one
\`ledger_post\` statement that locks the accounts \`FOR UPDATE\` in ID order, refuses overdrafts, inserts the
immutable transfer and updates the balances. **holds**: \`createHold\`/\`voidHold\` pairs, each a database
transaction that also writes the hold row and its lock/release transaction record. "pg direct" sends the same
SQL statements straight through \`pg\`. **grouped**: the same transfer pairs, each transfer a group of its own
posted with \`postTransferGroup\` (group commit, issue #18): while one batch is in the database the other
workers' groups queue, then go out together in one \`ledger_post_groups\` statement and one commit (each group
all or nothing, refused on its own). Targets (issue #18): grouped spread ≥ ${GROUPED_FACTOR} × the ungrouped
spread rate recorded before group commit (${RECORDED_UNGROUPED_SPREAD}/s) and ≥ ${GROUPED_FACTOR} × the
ungrouped spread line of the same run; grouped hot ≥ the ungrouped hot line. Hot: one wallet. Spread: a random wallet out of
${WALLETS.toLocaleString('en')}. CPU: this Node process's CPU time per transfer (user + system).

| path | transfers/s | transfers | errors | node CPU ms/transfer |
|---|---|---|---|---|
${rows.join('\n')}

Group commit in this run: ${grouping.join('; ') || 'no grouped lines'}.

Invariant after the run (${transfers.rows[0]!.n} transfers in the ledger): every balance equals its transfers
(${c.badBalance} mismatches), no wallet account negative (${c.negative}), all accounts sum to
${c.total}, locked equals what pending holds hold (${c.lockedMismatch} mismatches):
**${intact ? 'intact' : 'BROKEN'}**.
`;
writeBenchSection('billing', md);
await pool.end();
await database.close();
await testDb.drop();
if (!intact) process.exit(1);
// A run of chosen lines (BENCH_PATHS) is a trial of those lines: the usage benchmark is left out.
if (!process.env.BENCH_PATHS) await import('./usage.ts');
