/**
 * Billing asks the real provider registry who owns a machine (with its own machine client's token from the real
 * auth service), for the provider accounts: only the machine's owner opens its provider wallet and sets its rates;
 * a machine the registry does not know is 404; a registry that cannot be reached is a 503, not a hang.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import { checkRunningProviders } from '../services/billing/src/domain/sessions/provider-offline.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { gpu, providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;
let deadRegistry: BillingHarness;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  // Nothing listens on port 9 (discard) here: every call fails at once.
  deadRegistry = await billingWithRegistry(platform, { registryUrl: 'http://127.0.0.1:9', timeout: '500ms' });
});
afterAll(async () => {
  await billing?.close();
  await deadRegistry?.close();
});

/** A user of the real auth service with the provider role, and their bearer header. */
async function providerUser() {
  const { user, tokens } = await platform.verifiedUser(['provider']);
  return { id: user.id, headers: { authorization: `Bearer ${tokens.access_token}` } };
}

/** A machine registered at the real registry by its owner. */
async function machineOf(
  owner: { id: string; headers: Record<string, string> },
  over: Record<string, unknown> = {},
): Promise<string> {
  const res = await fetch(`${platform.registryUrl}/providers`, {
    method: 'POST',
    headers: { ...owner.headers, 'content-type': 'application/json' },
    body: JSON.stringify(providerBody({ owner_id: owner.id, ...over })),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

const call = (
  h: BillingHarness,
  headers: Record<string, string>,
  method: 'POST' | 'PUT' | 'GET' | 'DELETE',
  url: string,
  payload?: unknown,
) => h.app.inject({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });

const providerWallet = (providerId: string) => ({
  owner_type: 'provider',
  owner_id: providerId,
  solana_address: base58Encode(randomBytes(32)),
});

/** The body of a start-session for one GPU of `gpuModel` on a registry machine at `rate` (per hour, accepted). */
function rentBody(userId: string, walletId: string, machine: string, gpuModel: string, rate: string) {
  return {
    user_id: userId,
    wallet_id: walletId,
    provider_id: machine,
    job_id: randomUUID(),
    gpu_model: gpuModel,
    gpu_count: 1,
    requested_vram_mb: 0,
    estimated_power_w: 0,
    accepted_hourly_rate: rate,
  };
}

/** A renter signed up through auth, with a wallet of their own holding 100 tokens. */
async function fundedRenter() {
  const { user, tokens } = await platform.verifiedUser(['renter']);
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await call(billing, headers, 'POST', '/wallet', {
    owner_type: 'user',
    owner_id: user.id,
    solana_address: base58Encode(randomBytes(32)),
  });
  expect(wallet.statusCode).toBe(201);
  await billing.credit(wallet.json().id, '100');
  return { userId: user.id, headers, walletId: wallet.json().id as string };
}

describe('billing and the provider registry', () => {
  it("opens a provider wallet for the machine's owner only, held by that owner", async () => {
    const owner = await providerUser();
    const other = await providerUser();
    const machine = await machineOf(owner);

    const stranger = await call(billing, other.headers, 'POST', '/wallet', providerWallet(machine));
    expect(stranger.statusCode).toBe(403);
    expect(stranger.json().code).toBe('NOT_PROVIDER_OWNER');

    const opened = await call(billing, owner.headers, 'POST', '/wallet', providerWallet(machine));
    expect(opened.statusCode).toBe(201);
    expect(opened.json()).toMatchObject({ owner_type: 'provider', owner_id: machine, holder_id: owner.id });

    // The owner reads the earnings and sets the rates; the other provider does neither.
    expect((await call(billing, owner.headers, 'GET', `/provider/${machine}/earnings`)).statusCode).toBe(200);
    expect((await call(billing, other.headers, 'GET', `/provider/${machine}/earnings`)).statusCode).toBe(403);
    const rates = { base_rates: { 'NVIDIA H100 80GB HBM3': '3.50' } };
    expect((await call(billing, other.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(403);
    expect((await call(billing, owner.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(200);
  });

  it('sets rates before any wallet exists by asking the registry, and refuses machines it does not know', async () => {
    const owner = await providerUser();
    const machine = await machineOf(owner);
    const rates = { base_rates: { default: '1.25' } };
    expect((await call(billing, owner.headers, 'PUT', `/provider/${machine}/rates`, rates)).statusCode).toBe(200);

    const unknown = randomUUID();
    const res = await call(billing, owner.headers, 'POST', '/wallet', providerWallet(unknown));
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('PROVIDER_NOT_FOUND');
    const put = await call(billing, owner.headers, 'PUT', `/provider/${unknown}/rates`, rates);
    expect(put.statusCode).toBe(404);
  });

  it("answers 403 on another provider's machine whether or not it has a wallet; only its owner learns it has none", async () => {
    const owner = await providerUser();
    const other = await providerUser();
    const withWallet = await machineOf(owner);
    const bare = await machineOf(owner);
    const opened = await call(billing, owner.headers, 'POST', '/wallet', providerWallet(withWallet));
    expect(opened.statusCode).toBe(201);
    await billing.credit(opened.json().id, '50');
    const routes: ['GET' | 'POST' | 'PUT', string, object?][] = [
      ['POST', 'payout', { amount: '10', destination: base58Encode(randomBytes(32)) }],
      ['GET', 'earnings'],
      ['GET', 'payout-settings'],
      ['PUT', 'payout-settings', { auto_payout: false }],
      ['PUT', 'rates', { base_rates: { default: '1.25' } }],
    ];
    for (const [method, path, payload] of routes) {
      for (const machine of [withWallet, bare]) {
        const res = await call(billing, other.headers, method, `/provider/${machine}/${path}`, payload);
        expect(res.statusCode, `${method} ${path} ${machine}`).toBe(403);
        expect(res.json()).toMatchObject({ code: 'NOT_PROVIDER_OWNER' });
        expect(res.json().detail).not.toContain(opened.json().id);
      }
    }
    // The owner is told the bare machine has no wallet yet; a machine the registry does not know is 404 for anyone.
    const own = await call(billing, owner.headers, 'POST', `/provider/${bare}/payout`, { amount: '10' });
    expect(own.statusCode).toBe(404);
    expect(own.json().code).toBe('WALLET_NOT_FOUND');
    const unknown = await call(billing, other.headers, 'GET', `/provider/${randomUUID()}/earnings`);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().code).toBe('PROVIDER_NOT_FOUND');
    const balance = await call(billing, owner.headers, 'GET', `/wallet/${opened.json().id}/balance`);
    expect(balance.json()).toMatchObject({ available: '50.000000', pending: '0.000000' });
  });

  it('answers 503 PROVIDER_REGISTRY_UNAVAILABLE when the registry cannot be reached, and writes nothing', async () => {
    const owner = await providerUser();
    const machine = randomUUID();
    const started = Date.now();
    const res = await call(deadRegistry, owner.headers, 'POST', '/wallet', providerWallet(machine));
    expect(res.statusCode).toBe(503);
    expect(res.json().code).toBe('PROVIDER_REGISTRY_UNAVAILABLE');
    expect(res.headers['retry-after']).toBe('5');
    expect(Date.now() - started).toBeLessThan(10_000);
    const rows = await deadRegistry.db.selectFrom('wallets').select('id').where('owner_id', '=', machine).execute();
    expect(rows).toEqual([]);
  });

  it('starts a session only on a known, idle machine, priced from its record, earnings to a wallet opened on first need', async () => {
    const owner = await providerUser();
    // Two H100s as nvidia-smi names them (the rate table's key is nvidia-tesla-h100), and a broken third.
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };
    const machine = await machineOf(owner, {
      gpus: [gpu(h100), gpu(h100), gpu({ ...h100, is_healthy: false })],
    });
    const { userId, headers: renter, walletId } = await fundedRenter();
    // What the renter declares does not price the session: the machine's record does.
    const body = {
      user_id: userId,
      wallet_id: walletId,
      provider_id: machine,
      job_id: randomUUID(),
      gpu_model: 'H100',
      gpu_count: 2,
      requested_vram_mb: 1,
      estimated_power_w: 1,
      accepted_hourly_rate: '13',
    };
    // The quote for the machine prices what the start will: its record, not the declared figures.
    const quote = await call(billing, renter, 'POST', '/pricing/calculate', {
      gpu_model: 'H100',
      gpu_count: 2,
      provider_id: machine,
    });
    expect(quote.statusCode, quote.body).toBe(200);
    expect(quote.json()).toMatchObject({
      rate_key: 'nvidia-tesla-h100',
      requested_vram_mb: 163118,
      estimated_power_w: 1400,
    });
    expect(quote.json().total_hourly_rate).toMatch(/^12\.58589/);
    // Quoting a machine reads the registry: it takes a token; pricing plain figures does not.
    const anonymous = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/pricing/calculate',
      headers: { authorization: undefined as unknown as string },
      payload: { gpu_model: 'H100', provider_id: machine },
    });
    expect(anonymous.statusCode).toBe(401);
    const unknownQuote = await call(billing, renter, 'POST', '/pricing/calculate', {
      gpu_model: 'H100',
      provider_id: randomUUID(),
    });
    expect(unknownQuote.statusCode).toBe(404);
    const started = await call(billing, renter, 'POST', '/billing/start-session', {
      ...body,
      accepted_hourly_rate: quote.json().total_hourly_rate,
    });
    expect(started.statusCode, started.body).toBe(201);
    // 2 × 4.00 + 2 × 81559 MB / 1024 × 0.02 + 1400 W × 0.001 = 8 + 3.1858984375 + 1.4
    expect(started.json().session).toMatchObject({
      provider_id: machine,
      gpu_model: 'nvidia-tesla-h100',
      gpu_count: 2,
      requested_vram_mb: 163118,
      estimated_power_w: 1400,
    });
    expect(started.json().session.rates).toMatchObject({
      rate_key: 'nvidia-tesla-h100',
      base_rate_per_gpu: '4.000000',
    });
    expect(started.json().session.rates.total_hourly_rate).toMatch(/^12\.58589/);
    const providerWallet = await billing.db
      .selectFrom('wallets')
      .selectAll()
      .where('owner_type', '=', 'provider')
      .where('owner_id', '=', machine)
      .executeTakeFirstOrThrow();
    expect(providerWallet).toMatchObject({ holder_id: owner.id, solana_address: null });

    // The owner's daemon reports its usage; the session's provider owner came from the registry.
    const daemon = await platform.machineClient('daemon', owner.id);
    const usage = await call(
      billing,
      { authorization: `Bearer ${await daemon.get()}` },
      'POST',
      '/billing/usage-update',
      {
        session_id: started.json().session.id,
        timestamp: new Date().toISOString(),
        gpu_utilization: 90,
        power_draw_w: 1300,
      },
    );
    expect(usage.statusCode).toBe(201);

    // More GPUs than the machine has healthy, a machine in maintenance, an unknown machine.
    const more = await call(billing, renter, 'POST', '/billing/start-session', {
      ...body,
      job_id: randomUUID(),
      gpu_count: 3,
    });
    expect(more.statusCode).toBe(409);
    expect(more.json().code).toBe('PROVIDER_NOT_AVAILABLE');
    const maintenance = await machineOf(owner, { status: 'maintenance', gpus: [gpu(h100)] });
    const busy = await call(billing, renter, 'POST', '/billing/start-session', {
      ...body,
      job_id: randomUUID(),
      provider_id: maintenance,
      gpu_count: 1,
    });
    expect(busy.statusCode).toBe(409);
    expect(busy.json()).toMatchObject({ code: 'PROVIDER_NOT_AVAILABLE', provider_status: 'maintenance' });
    // A machine its owner holds off the market (an explicit busy, no session on it) takes no rental either.
    const held = await machineOf(owner, { status: 'busy', gpus: [gpu(h100)] });
    const onHeld = await call(billing, renter, 'POST', '/billing/start-session', {
      ...body,
      job_id: randomUUID(),
      provider_id: held,
      gpu_count: 1,
    });
    expect(onHeld.statusCode, onHeld.body).toBe(409);
    expect(onHeld.json()).toMatchObject({ code: 'PROVIDER_NOT_AVAILABLE', provider_status: 'busy' });
    expect(onHeld.json().detail).toMatch(/held/);
    const unknown = await call(billing, renter, 'POST', '/billing/start-session', {
      ...body,
      job_id: randomUUID(),
      provider_id: randomUUID(),
    });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().code).toBe('PROVIDER_NOT_FOUND');

    // Paying out of the address-less wallet needs a destination.
    const payout = await call(billing, owner.headers, 'POST', `/provider/${machine}/payout`, { amount: '10' });
    expect(payout.statusCode).toBe(400);
    expect(payout.json().code).toBe('DESTINATION_REQUIRED');
  });

  it('lets one of two renters starting at once on one idle machine have it, and the next once that session ends', async () => {
    const owner = await providerUser();
    const machine = await machineOf(owner, {
      gpus: [gpu({ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, power_consumption: 400 })],
    });
    const renters = await Promise.all([0, 1, 2].map(() => fundedRenter()));
    const start = (r: (typeof renters)[number]) =>
      call(billing, r.headers, 'POST', '/billing/start-session', rentBody(r.userId, r.walletId, machine, 'A100', '10'));
    // The registry still shows the machine idle to both (no session event reaches it in this test): billing's own
    // reservation decides, across its instances, in one database.
    const [a, b] = await Promise.all([start(renters[0]!), start(renters[1]!)]);
    const statuses = [a.statusCode, b.statusCode].sort();
    expect(statuses, `${a.body} ${b.body}`).toEqual([201, 409]);
    const [won, lost] = a.statusCode === 201 ? [a, b] : [b, a];
    expect(lost.json()).toMatchObject({
      code: 'PROVIDER_NOT_AVAILABLE',
      provider_id: machine,
      provider_status: 'busy',
    });
    const loser = a.statusCode === 201 ? renters[1]! : renters[0]!;
    // The refused renter was charged nothing: no hold, the whole balance available.
    const balance = await call(billing, loser.headers, 'GET', `/wallet/${loser.walletId}/balance`);
    expect(balance.json()).toMatchObject({ available: '100.000000', locked: '0.000000' });
    expect((await start(renters[2]!)).statusCode).toBe(409);

    const winner = a.statusCode === 201 ? renters[0]! : renters[1]!;
    const ended = await call(billing, winner.headers, 'POST', '/billing/end-session', {
      session_id: won.json().session.id,
    });
    expect(ended.statusCode, ended.body).toBe(200);
    const next = await start(renters[2]!);
    expect(next.statusCode, next.body).toBe(201);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('starts a session when it gets its GPUs, never before the end of the session that held them', async () => {
    const owner = await providerUser();
    const machine = await machineOf(owner, {
      gpus: [gpu({ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, power_consumption: 400 })],
    });
    const [a, b] = [await fundedRenter(), await fundedRenter()];
    const start = (r: typeof a) =>
      call(billing, r.headers, 'POST', '/billing/start-session', rentBody(r.userId, r.walletId, machine, 'A100', '10'));
    const first = await start(a);
    expect(first.statusCode, first.body).toBe(201);
    // B's start waits for the machine's lease lock (held here, as a start on another instance would hold it) while
    // A's session ends; the lock let go, B gets the GPU A held.
    let second: ReturnType<typeof start> | undefined;
    let ended: Awaited<ReturnType<typeof start>> | undefined;
    await billing.db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`gpus:${machine}`}, 0))`.execute(trx);
      second = start(b);
      for (let i = 0; ; i++) {
        const { rows } = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(billing.db);
        if (rows[0]!.n > 0) break;
        if (i > 500) throw new Error("the second start never waited for the machine's lease lock");
        await new Promise((r) => setTimeout(r, 10));
      }
      ended = await call(billing, a.headers, 'POST', '/billing/end-session', { session_id: first.json().session.id });
      expect(ended.statusCode, ended.body).toBe(200);
    });
    const next = await second!;
    expect(next.statusCode, next.body).toBe(201);
    expect(next.json().session.gpu_indices).toEqual([0]);
    // The records can be audited: no moment has two sessions on one GPU.
    const endedAt = Date.parse(ended!.json().session.ended_at);
    expect(Date.parse(next.json().session.started_at)).toBeGreaterThanOrEqual(endedAt);
  });

  it('derives the GPU model of a machine with one model, and asks for it on a machine with several', async () => {
    const owner = await providerUser();
    const a100 = gpu({ model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, power_consumption: 400 });
    const h100 = gpu({ model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 });
    const single = await machineOf(owner, { gpus: [a100, a100] });
    const mixed = await machineOf(owner, { gpus: [a100, h100] });
    const r = await fundedRenter();
    const { user_id: _u, job_id: _j, gpu_model: _m, ...body } = rentBody(r.userId, r.walletId, single, 'A100', '10');
    const started = await call(billing, r.headers, 'POST', '/billing/start-session', body);
    expect(started.statusCode, started.body).toBe(201);
    expect(started.json().session).toMatchObject({ gpu_model: 'nvidia-tesla-a100', gpu_indices: [0] });
    const refused = await call(billing, r.headers, 'POST', '/billing/start-session', { ...body, provider_id: mixed });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toMatchObject({ code: 'GPU_MODEL_REQUIRED', errors: [{ path: 'body.gpu_model' }] });
    expect(refused.json().detail).toMatch(/A100.*H100/);
    // A model the machine has none of is refused with the models it has, never rented (nor billed, nor quoted) as its
    // other model.
    const wrong = await call(billing, r.headers, 'POST', '/billing/start-session', { ...body, gpu_model: 'H100' });
    expect(wrong.statusCode, wrong.body).toBe(409);
    expect(wrong.json()).toMatchObject({
      code: 'GPU_MODEL_NOT_ON_MACHINE',
      provider_id: single,
      gpu_models: ['NVIDIA A100-SXM4-80GB'],
    });
    const quoted = await call(billing, r.headers, 'POST', '/pricing/calculate', {
      gpu_model: 'banana',
      gpu_count: 1,
      provider_id: single,
    });
    expect(quoted.json()).toMatchObject({ code: 'GPU_MODEL_NOT_ON_MACHINE' });
    // A reservation's GPUs are of the model they are: a start that uses one names none.
    const scheduler = { authorization: `Bearer ${await (await platform.machineClient('scheduler')).get()}` };
    const reserved = await call(billing, scheduler, 'POST', '/billing/reservations', {
      user_id: r.userId,
      provider_id: mixed,
      gpu_model: 'H100',
      gpu_count: 1,
    });
    expect(reserved.statusCode, reserved.body).toBe(201);
    const onReservation = await call(billing, r.headers, 'POST', '/billing/start-session', {
      ...body,
      provider_id: mixed,
      reservation_id: reserved.json().id,
    });
    expect(onReservation.statusCode, onReservation.body).toBe(201);
    expect(onReservation.json().session).toMatchObject({ gpu_model: 'nvidia-tesla-h100', gpu_indices: [1] });
  });

  it('rents N of M GPUs, priced and quoted for those N: two renters share a machine, a third waits for one to end', async () => {
    const owner = await providerUser();
    const a100 = { model_name: 'NVIDIA A100-SXM4-80GB', vram: 81920, power_consumption: 400 };
    const machine = await machineOf(owner, { gpus: [gpu(a100), gpu(a100), gpu(a100), gpu(a100)] });
    const renters = await Promise.all([0, 1, 2].map(() => fundedRenter()));
    const quote = await call(billing, renters[0]!.headers, 'POST', '/pricing/calculate', {
      gpu_model: 'A100',
      gpu_count: 2,
      provider_id: machine,
    });
    // 2 × 2.00 + 2 × 80 GB × 0.02 + 800 W × 0.001
    expect(quote.json()).toMatchObject({ gpu_count: 2, total_hourly_rate: '8.000000' });
    const start = (r: (typeof renters)[number], count: number, rate = '8') =>
      call(billing, r.headers, 'POST', '/billing/start-session', {
        ...rentBody(r.userId, r.walletId, machine, 'A100', rate),
        gpu_count: count,
      });
    const first = await start(renters[0]!, 2);
    expect(first.statusCode, first.body).toBe(201);
    expect(first.json().session).toMatchObject({
      gpu_count: 2,
      gpu_indices: [0, 1],
      requested_vram_mb: 163840,
      estimated_power_w: 800,
      rates: { total_hourly_rate: quote.json().total_hourly_rate },
    });
    const second = await start(renters[1]!, 2);
    expect(second.json().session).toMatchObject({ gpu_count: 2, gpu_indices: [2, 3] });
    // Nothing left: the third renter is refused and charged nothing.
    const third = await start(renters[2]!, 1, '10');
    expect(third.statusCode).toBe(409);
    expect(third.json()).toMatchObject({ code: 'PROVIDER_NOT_AVAILABLE', provider_status: 'busy' });
    const balance = await call(billing, renters[2]!.headers, 'GET', `/wallet/${renters[2]!.walletId}/balance`);
    expect(balance.json()).toMatchObject({ available: '100.000000', locked: '0.000000' });

    // Ending the first frees its two GPUs only: the third gets exactly those, the second runs on.
    const ended = await call(billing, renters[0]!.headers, 'POST', '/billing/end-session', {
      session_id: first.json().session.id,
    });
    expect(ended.statusCode, ended.body).toBe(200);
    expect((await start(renters[2]!, 3, '20')).json()).toMatchObject({ code: 'PROVIDER_NOT_AVAILABLE' });
    const next = await start(renters[2]!, 2);
    expect(next.statusCode, next.body).toBe(201);
    expect(next.json().session.gpu_indices).toEqual([0, 1]);
    const running = await call(
      billing,
      renters[1]!.headers,
      'GET',
      `/billing/current-usage/${second.json().session.id}`,
    );
    expect(running.json().status).toBe('active');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('never gives one GPU to two sessions, however many renters start at once on one machine', async () => {
    const owner = await providerUser();
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };
    const machine = await machineOf(owner, { gpus: Array.from({ length: 8 }, () => gpu(h100)) });
    const renters = await Promise.all(Array.from({ length: 12 }, () => fundedRenter()));
    // Twelve renters ask for 2 or 3 GPUs each of eight, all at once.
    const answers = await Promise.all(
      renters.map((r, i) =>
        call(billing, r.headers, 'POST', '/billing/start-session', {
          ...rentBody(r.userId, r.walletId, machine, 'H100', '50'),
          gpu_count: 2 + (i % 2),
        }),
      ),
    );
    const started = answers.filter((a) => a.statusCode === 201).map((a) => a.json().session);
    for (const a of answers.filter((x) => x.statusCode !== 201)) {
      expect(a.statusCode, a.body).toBe(409);
      expect(a.json().code).toBe('PROVIDER_NOT_AVAILABLE');
    }
    const held = started.flatMap((s) => s.gpu_indices as number[]);
    expect(new Set(held).size).toBe(held.length);
    expect(held.every((i) => i >= 0 && i < 8)).toBe(true);
    // As many as fit: fewer than two GPUs are left free.
    expect(8 - held.length).toBeLessThan(2);
    const leases = await billing.db
      .selectFrom('gpu_leases')
      .select(['gpu_index', 'session_id'])
      .where('provider_id', '=', machine)
      .execute();
    expect(leases.map((l) => l.gpu_index).sort((a, b) => a - b)).toEqual([...held].sort((a, b) => a - b));
    // Each session was priced for its own GPUs only.
    for (const s of started) expect(s.gpu_count).toBe(s.gpu_indices.length);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it("holds GPUs for the scheduler's renter until the reservation is used, cancelled or expires", async () => {
    const owner = await providerUser();
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };
    const machine = await machineOf(owner, { gpus: Array.from({ length: 4 }, () => gpu(h100)) });
    const scheduler = { authorization: `Bearer ${await (await platform.machineClient('scheduler')).get()}` };
    const [renter, other] = await Promise.all([fundedRenter(), fundedRenter()]);
    const reserve = (userId: string, count: number, ttl?: number) =>
      call(billing, scheduler, 'POST', '/billing/reservations', {
        user_id: userId,
        provider_id: machine,
        gpu_model: 'H100',
        gpu_count: count,
        ...(ttl ? { ttl_seconds: ttl } : {}),
      });
    // Renters cannot hold GPUs for nothing.
    const self = await call(billing, renter.headers, 'POST', '/billing/reservations', {
      user_id: renter.userId,
      provider_id: machine,
      gpu_model: 'H100',
      gpu_count: 1,
    });
    expect(self.statusCode).toBe(403);

    const reserved = await reserve(renter.userId, 3);
    expect(reserved.statusCode, reserved.body).toBe(201);
    expect(reserved.json()).toMatchObject({ user_id: renter.userId, provider_id: machine, gpu_indices: [0, 1, 2] });
    const expiresIn = Date.parse(reserved.json().expires_at) - Date.now();
    expect(expiresIn).toBeGreaterThan(50_000);
    expect(expiresIn).toBeLessThanOrEqual(60_000);
    const startAs = (r: typeof renter, body: Record<string, unknown>) =>
      call(billing, r.headers, 'POST', '/billing/start-session', {
        ...rentBody(r.userId, r.walletId, machine, 'H100', '50'),
        ...body,
      });
    // Held for the renter: another renter gets the one GPU left, not the reserved ones, nor the reservation.
    expect((await startAs(other, { gpu_count: 2 })).json().code).toBe('PROVIDER_NOT_AVAILABLE');
    const stolen = await startAs(other, { reservation_id: reserved.json().id });
    expect(stolen.statusCode).toBe(409);
    expect(stolen.json().code).toBe('RESERVATION_MISMATCH');
    // The reservation's GPUs, not others: a start asking for another count is refused, nothing held.
    const wrongCount = await startAs(renter, { reservation_id: reserved.json().id, gpu_count: 2 });
    expect(wrongCount.statusCode).toBe(409);
    expect(wrongCount.json().code).toBe('RESERVATION_MISMATCH');
    // A UUID is a UUID in capitals too.
    const started = await startAs(renter, { reservation_id: reserved.json().id.toUpperCase(), gpu_count: 3 });
    expect(started.statusCode, started.body).toBe(201);
    expect(started.json().session).toMatchObject({ gpu_count: 3, gpu_indices: [0, 1, 2] });
    // Used once: the reservation is gone.
    const again = await startAs(renter, { reservation_id: reserved.json().id });
    expect(again.statusCode).toBe(404);
    expect(again.json().code).toBe('RESERVATION_NOT_FOUND');

    // The last GPU, reserved for a few seconds, is free again once the reservation expires; a cancelled one at once.
    // (A few, not one: the second reservation must be refused while the first holds, however busy the machine.)
    const ttlSeconds = 4;
    const reservedAt = Date.now();
    const briefly = await reserve(other.userId, 1, ttlSeconds);
    expect(briefly.statusCode).toBe(201);
    expect((await reserve(renter.userId, 1)).json().code).toBe('PROVIDER_NOT_AVAILABLE');
    await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(briefly.json().expires_at) - Date.now()) + 100));
    expect(Date.now() - reservedAt).toBeGreaterThanOrEqual(ttlSeconds * 1000);
    const late = await reserve(renter.userId, 1);
    expect(late.statusCode, late.body).toBe(201);
    const cancelled = await call(billing, scheduler, 'DELETE', `/billing/reservations/${late.json().id}`);
    expect(cancelled.statusCode).toBe(204);
    expect((await call(billing, scheduler, 'DELETE', `/billing/reservations/${late.json().id}`)).statusCode).toBe(404);
    const last = await startAs(other, { gpu_count: 1 });
    expect(last.statusCode, last.body).toBe(201);
    expect(last.json().session.gpu_indices).toEqual([3]);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('lets a renter take GPUs reserved for them without naming the reservation, after the free ones', async () => {
    const owner = await providerUser();
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };
    const machine = await machineOf(owner, { gpus: Array.from({ length: 4 }, () => gpu(h100)) });
    const scheduler = { authorization: `Bearer ${await (await platform.machineClient('scheduler')).get()}` };
    const [renter, other] = await Promise.all([fundedRenter(), fundedRenter()]);
    const reserved = await call(billing, scheduler, 'POST', '/billing/reservations', {
      user_id: renter.userId,
      provider_id: machine,
      gpu_model: 'H100',
      gpu_count: 2,
    });
    expect(reserved.json().gpu_indices).toEqual([0, 1]);
    const startAs = (r: typeof renter, count: number) =>
      call(billing, r.headers, 'POST', '/billing/start-session', {
        ...rentBody(r.userId, r.walletId, machine, 'H100', '50'),
        gpu_count: count,
      });
    // Another renter finds only the two free GPUs; the renter the two are held for finds all four.
    expect((await startAs(other, 3)).json().code).toBe('PROVIDER_NOT_AVAILABLE');
    const started = await startAs(renter, 3);
    expect(started.statusCode, started.body).toBe(201);
    expect(started.json().session.gpu_indices).toEqual([0, 2, 3]);
    // The reserved GPU left is still held for the renter until the reservation is cancelled.
    expect((await startAs(other, 1)).json().code).toBe('PROVIDER_NOT_AVAILABLE');
    expect((await call(billing, scheduler, 'DELETE', `/billing/reservations/${reserved.json().id}`)).statusCode).toBe(
      204,
    );
    const last = await startAs(other, 1);
    expect(last.statusCode, last.body).toBe(201);
    expect(last.json().session.gpu_indices).toEqual([1]);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('without NATS, asks the registry about machines with running sessions and ends those of a machine gone offline', async () => {
    const owner = await providerUser();
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };
    const offline = await machineOf(owner, { gpus: [gpu(h100)] });
    const fine = await machineOf(owner, { gpus: [gpu(h100)] });
    const { userId, headers: renter, walletId } = await fundedRenter();
    const rent = async (machine: string) => {
      const res = await call(
        billing,
        renter,
        'POST',
        '/billing/start-session',
        rentBody(userId, walletId, machine, 'H100', '10'),
      );
      expect(res.statusCode, res.body).toBe(201);
      return res.json().session.id as string;
    };
    const lost = await rent(offline);
    const kept = await rent(fine);
    const patched = await fetch(`${platform.registryUrl}/providers/${offline}/status`, {
      method: 'PATCH',
      headers: { ...owner.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ status: 'offline' }),
    });
    expect(patched.status).toBe(200);

    const ended = await checkRunningProviders(billing.ctx);
    expect(ended.map((e) => e.session.id)).toEqual([lost]);
    const status = async (id: string) =>
      (await call(billing, renter, 'GET', `/billing/current-usage/${id}`)).json().status as string;
    expect(await status(lost)).toBe('terminated');
    expect(await status(kept)).toBe('active');
    const record = await billing.db
      .selectFrom('billing_records')
      .selectAll()
      .where('session_id', '=', lost)
      .executeTakeFirstOrThrow();
    // No usage report ever arrived: nothing was delivered, nothing is charged.
    expect(record).toMatchObject({ end_reason: 'provider_offline', billed_minutes: 0 });
    // A second run ends nothing more.
    expect(await checkRunningProviders(billing.ctx)).toEqual([]);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });
});
