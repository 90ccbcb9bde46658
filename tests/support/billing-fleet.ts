/**
 * Renters, providers and sessions for tests that run billing as real processes (tests/multi-instance-billing.test.ts),
 * and the checks of billing's own data afterwards: per session one billing record charging exactly the minutes that
 * elapsed, the renter paying exactly that, the provider and the platform paid exactly their shares, one start and
 * one end event, and a consistent ledger.
 *
 * Wallets are created and funded in billing's database through billing's own functions (a confirmed deposit needs
 * the chain, which is not what these tests are about); everything else goes through billing's HTTP API.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Caller, TestIssuer } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { expect } from 'vitest';
import type { BillingDB } from '../../services/billing/src/db/schema.ts';
import { SYSTEM_ACCOUNT_IDS } from '../../services/billing/src/db/system-accounts.ts';
import { base58Encode } from '../../services/billing/src/domain/chain/base58.ts';
import { postTransfers } from '../../services/billing/src/domain/ledger/ledger.ts';
import { Dec, splitFee } from '../../services/billing/src/domain/ledger/money.ts';
import { costOfMinutes } from '../../services/billing/src/domain/pricing/pricing.ts';
import { createWallet } from '../../services/billing/src/domain/wallets/wallets.ts';
import { ledgerProblems } from '../../services/billing/test/support/ledger-check.ts';
import type { Instance } from './instance.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MINUTE = 60_000;

/** H100 × 1, 40 GB, 300 W: 4.00 + 0.80 + 0.30 = 5.10 per hour, 0.085 per minute. */
export const H100 = { gpu_model: 'NVIDIA Tesla H100', gpu_count: 1, requested_vram_mb: 40960, estimated_power_w: 300 };
export const H100_RATE = '5.10';

export interface Provider {
  /** The machine's ID (the sessions' `provider_id`). */
  id: string;
  walletId: string;
  /** The daemon of the machine's owner: reports the usage of its sessions. */
  daemon: Caller;
}

export interface Renter {
  user: Caller;
  walletId: string;
  funds: string;
}

export interface Session {
  id: string;
  renter: Renter;
  provider: Provider;
}

/** A provider machine with its wallet (held by its owner) and its owner's daemon. */
export async function createProvider(db: Kysely<BillingDB>, issuer: TestIssuer): Promise<Provider> {
  const owner = await issuer.user(['provider']);
  const id = randomUUID();
  const wallet = await createWallet(db, {
    ownerType: 'provider',
    ownerId: id,
    holderId: owner.id,
    solanaAddress: null,
  });
  return { id, walletId: wallet.id, daemon: await issuer.client('daemon', owner.id) };
}

/** A renter with a wallet holding `funds` (credited as a confirmed deposit would). */
export async function createRenter(db: Kysely<BillingDB>, issuer: TestIssuer, funds: string): Promise<Renter> {
  const user = await issuer.user(['renter']);
  // A user wallet names its Solana address (any 32 bytes: no chain is involved).
  const address = base58Encode(randomBytes(32));
  const wallet = await createWallet(db, { ownerType: 'user', ownerId: user.id, solanaAddress: address });
  await db.transaction().execute((trx) =>
    postTransfers(trx, [
      {
        debit: { system: 'chain_incoming' },
        credit: { wallet: wallet.id, kind: 'available' },
        amount: new Dec(funds),
        code: 'test_credit',
      },
    ]),
  );
  return { user, walletId: wallet.id, funds };
}

/** Starts a session through `via`, as the renter, at the price they accepted. */
export async function startSession(via: Instance, renter: Renter, provider: Provider): Promise<Session> {
  const res = await fetch(`${via.url}/api/v1/billing/start-session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...renter.user.headers },
    body: JSON.stringify({
      user_id: renter.user.id,
      wallet_id: renter.walletId,
      provider_id: provider.id,
      job_id: randomUUID(),
      accepted_hourly_rate: H100_RATE,
      ...H100,
    }),
  });
  if (res.status !== 201) throw new Error(`start-session: ${res.status} ${await res.text()}`);
  const { session } = (await res.json()) as { session: { id: string } };
  return { id: session.id, renter, provider };
}

/**
 * Makes billing time pass: the processes bill by their real clock, so the test moves the sessions' start back
 * instead (one minute per step, one session per statement, as any writer of the row would, under its lock).
 */
export class TimeMachine {
  private timer?: Promise<void>;
  private running = false;
  constructor(private readonly db: Kysely<BillingDB>) {}

  /** Moves the running sessions among `ids` `minutes` into their past. */
  async shift(ids: string[], minutes: number) {
    for (const id of ids) {
      await sql`UPDATE rental_sessions SET started_at = started_at - make_interval(mins => ${minutes})
                 WHERE id = ${id} AND status IN ('active', 'grace_period')`.execute(this.db);
    }
  }

  /** One minute every `everyMs` until stop(). */
  run(ids: string[], everyMs = 250) {
    this.running = true;
    this.timer = (async () => {
      while (this.running) {
        await this.shift(ids, 1);
        await sleep(everyMs);
      }
    })();
  }

  async stop() {
    this.running = false;
    await this.timer;
  }
}

/**
 * Takes the sessions' row locks (in ID order, as billing takes them) and holds them until the returned function is
 * called: every usage update and billing of these sessions waits meanwhile, inside the instance that has it.
 */
export async function lockSessions(db: Kysely<BillingDB>, ids: string[]): Promise<() => Promise<void>> {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  const { promise: holding, resolve: locked } = Promise.withResolvers<void>();
  const done = db.transaction().execute(async (trx) => {
    await sql`SELECT id FROM rental_sessions WHERE id = ANY(${ids}::uuid[]) ORDER BY id FOR UPDATE`.execute(trx);
    locked();
    await released;
  });
  await Promise.race([holding, done]);
  return async () => {
    release();
    await done;
  };
}

/** Polls `check` until it returns nothing (an empty list of what is still wrong) or `ms` pass; returns the last. */
export async function eventually<T>(check: () => Promise<T[]>, ms = 30_000): Promise<T[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const wrong = await check();
    if (wrong.length === 0 || Date.now() > deadline) return wrong;
    await sleep(100);
  }
}

/** The outbox events billing recorded about these sessions, by session: kinds in order. */
export async function sessionEvents(db: Kysely<BillingDB>, ids: string[]): Promise<Map<string, string[]>> {
  const rows = await sql<{ kind: string; session_id: string }>`
    SELECT kind, payload->'session'->>'id' AS session_id FROM outbox_events
     WHERE payload->'session'->>'id' = ANY(${ids}::text[]) ORDER BY created_at, kind`.execute(db);
  const byId = new Map<string, string[]>(ids.map((id) => [id, []]));
  for (const r of rows.rows) byId.get(r.session_id)?.push(r.kind);
  return byId;
}

async function balance(via: Instance, admin: Caller, walletId: string) {
  const res = await fetch(`${via.url}/api/v1/wallet/${walletId}/balance`, { headers: admin.headers });
  expect(res.status).toBe(200);
  return (await res.json()) as { available: string; locked: string };
}

/**
 * Every session ended exactly once and was charged exactly its minutes: one billing record whose minutes are those
 * elapsed between its start and end (started minutes for `completed`; `terminated` ones as `expectTerminated` says),
 * cost = rate × minutes, fee and provider share split from it; the renter's wallet lost exactly that (nothing still
 * locked); each provider wallet holds exactly the earnings of its billing records, the platform the fees of all;
 * one start and one end event per session; the ledger balances.
 */
export async function expectChargedOnce(
  db: Kysely<BillingDB>,
  via: Instance,
  admin: Caller,
  sessions: Session[],
  expectTerminated: (s: Session) => { minutes: number } | undefined = () => undefined,
) {
  const ids = sessions.map((s) => s.id);
  const records = await db.selectFrom('billing_records').selectAll().where('session_id', 'in', ids).execute();
  expect(records.length).toBe(sessions.length);
  const events = await sessionEvents(db, ids);
  for (const s of sessions) {
    const r = records.find((x) => x.session_id === s.id)!;
    const row = await db.selectFrom('rental_sessions').selectAll().where('id', '=', s.id).executeTakeFirstOrThrow();
    const terminated = expectTerminated(s);
    const elapsed = new Date(r.ended_at).getTime() - new Date(row.started_at).getTime();
    const minutes = terminated ? terminated.minutes : Math.ceil(elapsed / MINUTE);
    const cost = costOfMinutes(new Dec(H100_RATE), minutes, 6);
    const { fee, rest } = splitFee(cost, new Dec(5), 6);
    expect(
      {
        status: r.status,
        minutes: r.billed_minutes,
        cost: r.total_cost,
        fee: r.platform_fee,
        rest: r.provider_earnings,
      },
      s.id,
    ).toEqual({
      status: terminated ? 'terminated' : 'completed',
      minutes,
      cost: cost.toFixed(6),
      fee: fee.toFixed(6),
      rest: rest.toFixed(6),
    });
    expect(row).toMatchObject({ status: r.status, billed_minutes: minutes });
    expect(await balance(via, admin, s.renter.walletId), s.id).toEqual(
      expect.objectContaining({ available: new Dec(s.renter.funds).minus(cost).toFixed(6), locked: '0.000000' }),
    );
    const kinds = events.get(s.id) ?? [];
    expect(kinds.filter((k) => k === 'session.started').length, s.id).toBe(1);
    expect(
      kinds.filter((k) => k === 'session.completed' || k === 'session.terminated'),
      s.id,
    ).toEqual([`session.${r.status}`]);
  }
  // The provider wallets and the platform hold exactly what all their billing records paid them.
  for (const walletId of new Set(sessions.map((s) => s.provider.walletId))) {
    const earned = await sql<{ sum: string }>`
      SELECT coalesce(sum(provider_earnings), 0) AS sum FROM billing_records WHERE provider_wallet_id = ${walletId}`.execute(
      db,
    );
    expect((await balance(via, admin, walletId)).available).toBe(new Dec(earned.rows[0]!.sum).toFixed(6));
  }
  const fees = await sql<{ fees: string; balance: string }>`
    SELECT (SELECT coalesce(sum(platform_fee), 0) FROM billing_records) AS fees,
           (SELECT balance FROM ledger_accounts WHERE id = ${SYSTEM_ACCOUNT_IDS.platform_fees}) AS balance`.execute(db);
  expect(new Dec(fees.rows[0]!.balance).eq(fees.rows[0]!.fees)).toBe(true);
  expect((await ledgerProblems(db)).problems).toEqual([]);
}

/** Ends each session through one of `instances` (some through all at once: one ends it, the others find it ended). */
export async function endAll(instances: Instance[], sessions: Session[]) {
  await Promise.all(
    sessions.map(async (s, i) => {
      const targets = i % 2 === 0 ? instances : [instances[i % instances.length]!];
      const answers = await Promise.all(
        targets.map(async (via) => {
          const res = await fetch(`${via.url}/api/v1/billing/end-session`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...s.renter.user.headers },
            body: JSON.stringify({ session_id: s.id }),
          });
          if (res.status !== 200) throw new Error(`end-session: ${res.status} ${await res.text()}`);
          return ((await res.json()) as { already_ended: boolean }).already_ended;
        }),
      );
      expect(answers.filter((x) => !x).length, s.id).toBe(1);
    }),
  );
}
