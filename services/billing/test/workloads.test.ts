/**
 * A session that runs a workload is billed only while the workload runs (against real PostgreSQL, by billing's own
 * clock moved by hand): nothing while it is pending or preparing, from the daemon's `running` report to the workload's
 * end, which ends the session billed to its last started minute; a workload that never runs costs nothing and ends
 * its session at the start deadline. Only the machine's daemon reports; a forged, replayed or reordered report
 * changes nothing it should not; a bad spec is a 400 naming what is wrong.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBillingCycle } from '../src/domain/sessions/index.ts';
import { endWorkloadsNeverStarted } from '../src/domain/workloads/index.ts';
import { H100_X1, manualClock } from './support/sessions.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

const clock = manualClock();
let h: BillingHarness;

beforeAll(async () => {
  h = await setupBilling({ now: clock.now });
});
afterAll(() => h?.close());

const spec = {
  command: ['python3', 'train.py', '--epochs', '3'],
  env: { WANDB_MODE: 'offline' },
  max_runtime_seconds: 3600,
};

/** A renter (a user token of their own) with funds, a machine owner with their daemon's token, and a start body. */
async function rental(funds = '100', over: Record<string, unknown> = {}) {
  const renterUser = await h.issuer.user(['renter']);
  const owner = await h.issuer.user(['provider']);
  const daemon = await h.issuer.client('daemon', owner.id);
  const renter = await h.fundedWallet(funds, 'user', undefined, { ownerId: renterUser.id });
  const provider = await h.fundedWallet('0', 'provider', undefined, { holderId: owner.id });
  const body = {
    user_id: renterUser.id,
    wallet_id: renter.id,
    provider_id: provider.ownerId,
    job_id: randomUUID(),
    ...H100_X1,
    accepted_hourly_rate: '5.10',
    workload: spec,
    ...over,
  };
  return { renterUser, owner, daemon, renter, body };
}

const startAs = (headers: Record<string, string>, body: object) =>
  h.app.inject({ method: 'POST', url: '/api/v1/billing/start-session', headers, payload: body });

const report = (headers: Record<string, string>, sessionId: string, body: object) =>
  h.app.inject({
    method: 'POST',
    url: `/api/v1/billing/sessions/${sessionId}/workload/state`,
    headers,
    payload: body,
  });

const workloadOf = (headers: Record<string, string>, sessionId: string) =>
  h.app.inject({ url: `/api/v1/billing/sessions/${sessionId}/workload`, headers });

const sessionRow = (id: string) =>
  h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('a session with a workload', () => {
  it('bills nothing before the workload runs, then its minutes until it exits, and ends with it', async () => {
    const r = await rental();
    const started = await startAs(r.renterUser.headers, r.body);
    expect(started.statusCode, started.body).toBe(201);
    const session = started.json().session;
    expect(session).toMatchObject({ workload: true, billed_from: null, status: 'active' });
    const id = session.id as string;
    expect((await workloadOf(r.renterUser.headers, id)).json()).toMatchObject({ state: 'pending', spec });
    // Its machine's daemon is nudged on the machine's own subject, which names the owner (a daemon's NATS user hears
    // its owner's machines alone).
    const nudges = () =>
      h.db
        .selectFrom('outbox_events')
        .select('payload')
        .where('kind', '=', `machine.${r.owner.id}.${r.body.provider_id}`)
        .orderBy('created_at')
        .execute();
    expect((await nudges()).map((n) => (n.payload as { change: string }).change)).toEqual(['started']);

    // Ten minutes of preparation (a slow machine), billed to nobody: the biller runs and bills nothing.
    clock.advance(5 * 60_000);
    expect((await report(r.daemon.headers, id, { state: 'preparing', at: clock.now() })).statusCode).toBe(200);
    clock.advance(4 * 60_000);
    await runBillingCycle(h.ctx);
    const usage = await h.app.inject({ url: `/api/v1/billing/current-usage/${id}`, headers: r.renterUser.headers });
    expect(usage.json()).toMatchObject({ elapsed_seconds: 0, billed_minutes: 0 });
    expect(Number(usage.json().cost_so_far)).toBe(0);

    const runningAt = clock.now();
    const running = await report(r.daemon.headers, id, { state: 'running', at: runningAt });
    expect(running.statusCode, running.body).toBe(200);
    expect(running.json()).toMatchObject({ state: 'running', running_at: runningAt.toISOString() });
    expect(running.json().session.billed_from).toBe(runningAt.toISOString());

    // It runs 2 minutes 10 seconds and exits with code 0: the session ends then, billed 3 started minutes.
    clock.advance(2 * 60_000 + 10_000);
    const exitedAt = clock.now();
    clock.advance(20_000); // the report arrives a little later: nothing after the exit is billed
    const exited = await report(r.daemon.headers, id, { state: 'exited', at: exitedAt, exit_code: 0 });
    expect(exited.statusCode, exited.body).toBe(200);
    expect(exited.json()).toMatchObject({ state: 'exited', exit_code: 0, ended_at: exitedAt.toISOString() });
    expect(exited.json().session).toMatchObject({
      status: 'completed',
      end_reason: 'workload_exited',
      billed_minutes: 3,
      ended_at: exitedAt.toISOString(),
    });
    expect(Number(exited.json().session.total_cost)).toBe(0.255); // 5.10/h × 3 min
    const record = await h.db
      .selectFrom('billing_records')
      .selectAll()
      .where('session_id', '=', id)
      .executeTakeFirstOrThrow();
    expect(record).toMatchObject({ billed_minutes: 3, end_reason: 'workload_exited' });
    expect(new Date(record.started_at).toISOString()).toBe(runningAt.toISOString());
    expect((await nudges()).map((n) => (n.payload as { change: string }).change)).toEqual(['started', 'ended']);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);

    // Replayed, the same end changes nothing; another end after it is refused.
    const again = await report(r.daemon.headers, id, { state: 'exited', at: clock.now(), exit_code: 0 });
    expect(again.statusCode).toBe(200);
    expect(again.json().ended_at).toBe(exitedAt.toISOString());
    const other = await report(r.daemon.headers, id, { state: 'stopped', at: clock.now(), reason: 'max_runtime' });
    expect(other.statusCode).toBe(409);
    expect(other.json().code).toBe('WORKLOAD_ENDED');
    // A late "running" never restarts billing.
    expect((await report(r.daemon.headers, id, { state: 'running', at: clock.now() })).statusCode).toBe(409);
  });

  it('costs nothing when it never runs: the session ends at the start deadline, a fault of the machine', async () => {
    const r = await rental();
    const started = await startAs(r.renterUser.headers, r.body);
    const id = started.json().session.id as string;
    clock.advance(4 * 60_000);
    await endWorkloadsNeverStarted(h.ctx);
    expect(await sessionRow(id)).toMatchObject({ status: 'active' });
    clock.advance(61_000);
    expect(await endWorkloadsNeverStarted(h.ctx)).toBeGreaterThanOrEqual(1);
    const row = await sessionRow(id);
    expect(row).toMatchObject({ status: 'terminated', end_reason: 'workload_not_started', billed_minutes: 0 });
    expect(row.total_cost).toMatch(/^0(\.0+)?$/);
    expect((await workloadOf(r.owner.headers, id)).json()).toMatchObject({ state: 'failed', reason: 'not_started' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it("ends a session unbilled, as the machine's fault, when its daemon could not restore a job's checkpoint", async () => {
    const r = await rental();
    const started = await startAs(r.renterUser.headers, r.body);
    const id = started.json().session.id as string;
    expect((await report(r.daemon.headers, id, { state: 'preparing', at: clock.now() })).statusCode).toBe(200);
    const failed = await report(r.daemon.headers, id, {
      state: 'failed',
      at: clock.now(),
      reason: 'checkpoint_unavailable',
    });
    expect(failed.statusCode, failed.body).toBe(200);
    const row = await sessionRow(id);
    expect(row).toMatchObject({ end_reason: 'workload_not_started', billed_minutes: 0 });
    expect(row.total_cost).toMatch(/^0(\.0+)?$/);
  });

  it("counts a capped session's cap from when the workload runs, and stops billing at its maximum runtime", async () => {
    const r = await rental('100', { spend_cap: '0.5' });
    const started = await startAs(r.renterUser.headers, r.body);
    expect(started.statusCode, started.body).toBe(201);
    const id = started.json().session.id as string;
    expect(started.json().session.spend_cap_ends_at).toBeNull();
    clock.advance(60_000);
    const runningAt = clock.now();
    const running = await report(r.daemon.headers, id, { state: 'running', at: runningAt });
    // 0.5 at 5.10/h pays for 5 min 52.94 s of running, counted from the workload's start.
    const capEnds = Date.parse(running.json().session.spend_cap_ends_at) - runningAt.getTime();
    expect(capEnds).toBeGreaterThan(352_000);
    expect(capEnds).toBeLessThan(353_000);
    clock.advance(90_000);
    const stopped = await report(r.daemon.headers, id, { state: 'stopped', at: clock.now(), reason: 'max_runtime' });
    expect(stopped.json().session).toMatchObject({
      status: 'completed',
      end_reason: 'workload_max_runtime',
      billed_minutes: 2,
    });
  });

  it('a session ended first records when its workload stopped, and bills nothing after its own end', async () => {
    const r = await rental();
    const id = (await startAs(r.renterUser.headers, r.body)).json().session.id as string;
    await report(r.daemon.headers, id, { state: 'running', at: clock.now() });
    clock.advance(30_000);
    const ended = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/end-session',
      headers: r.renterUser.headers,
      payload: { session_id: id },
    });
    expect(ended.json().session).toMatchObject({ status: 'completed', billed_minutes: 1 });
    clock.advance(5_000);
    const stopped = await report(r.daemon.headers, id, { state: 'stopped', at: clock.now(), reason: 'session_ended' });
    expect(stopped.statusCode, stopped.body).toBe(200);
    expect(stopped.json()).toMatchObject({ state: 'stopped', reason: 'session_ended' });
    expect(stopped.json().ended_at).toBe(ended.json().session.ended_at);
    expect(stopped.json().session).toMatchObject({ billed_minutes: 1, end_reason: ended.json().session.end_reason });
  });

  it('refuses to let a workload start or run once its session ended: the renter cannot end it to run for free', async () => {
    const r = await rental();
    const id = (await startAs(r.renterUser.headers, r.body)).json().session.id as string;
    expect((await report(r.daemon.headers, id, { state: 'preparing', at: clock.now() })).statusCode).toBe(200);
    // The renter ends the session while the daemon prepares the sandbox.
    await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/end-session',
      headers: r.renterUser.headers,
      payload: { session_id: id },
    });
    const running = await report(r.daemon.headers, id, { state: 'running', at: clock.now() });
    expect(running.statusCode).toBe(409);
    expect(running.json().code).toBe('SESSION_NOT_ACTIVE');
    // A session that ended before its daemon prepared anything: nothing may start.
    const other = await rental();
    const second = (await startAs(other.renterUser.headers, other.body)).json().session.id as string;
    await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/end-session',
      headers: other.renterUser.headers,
      payload: { session_id: second },
    });
    expect((await report(other.daemon.headers, second, { state: 'preparing', at: clock.now() })).statusCode).toBe(409);
    // Its end is still recorded.
    const stopped = await report(other.daemon.headers, second, {
      state: 'failed',
      at: clock.now(),
      reason: 'session_ended',
    });
    expect(stopped.statusCode).toBe(200);
  });

  it('never bills the preparation: a running time before the preparing report is moved up to it', async () => {
    const r = await rental();
    const id = (await startAs(r.renterUser.headers, r.body)).json().session.id as string;
    clock.advance(3 * 60_000);
    const prepared = clock.now();
    await report(r.daemon.headers, id, { state: 'preparing', at: prepared });
    clock.advance(10_000);
    const running = await report(r.daemon.headers, id, {
      state: 'running',
      at: new Date(prepared.getTime() - 120_000),
    });
    expect(running.json().running_at).toBe(prepared.toISOString());
  });

  it("takes reports only from the machine's daemon: the renter and another machine's daemon are refused", async () => {
    const r = await rental();
    const id = (await startAs(r.renterUser.headers, r.body)).json().session.id as string;
    const stranger = await h.issuer.client('daemon', randomUUID());
    // The renter may not say their own workload runs (nor is it theirs to say when it stopped).
    const own = await report(r.renterUser.headers, id, { state: 'exited', at: clock.now(), exit_code: 0 });
    expect(own.statusCode).toBe(403);
    const forged = await report(stranger.headers, id, { state: 'running', at: clock.now() });
    expect(forged.statusCode).toBe(403);
    expect(forged.json().code).toBe('NOT_SESSION_PROVIDER');
    // The stranger cannot read it either (its env may hold the renter's secrets).
    expect((await workloadOf(stranger.headers, id)).statusCode).toBe(403);
    expect((await sessionRow(id)).billed_from).toBeNull();
    // A report naming a time before the session started (or ahead of billing's clock) is kept within bounds.
    const early = await report(r.daemon.headers, id, {
      state: 'running',
      at: new Date(clock.now().getTime() - 86_400_000),
    });
    expect(Date.parse(early.json().running_at)).toBeGreaterThanOrEqual(Date.parse(early.json().session.started_at));
  });

  it('refuses a bad spec with a problem naming what is wrong, and starts nothing', async () => {
    const r = await rental();
    const bad: [object, RegExp][] = [
      [{ ...spec, env: { LD_PRELOAD: '/tmp/x.so' } }, /LD_PRELOAD is the dynamic loader's: refused/],
      [{ ...spec, env: { CUDA_VISIBLE_DEVICES: '0,1,2,3' } }, /CUDA_VISIBLE_DEVICES is set by the platform/],
      [{ ...spec, env: { '1BAD': 'x' } }, /env\.1BAD/],
      [{ ...spec, command: 'python3 train.py; rm -rf /' }, /command/],
      [{ ...spec, command: [] }, /command/],
      [{ ...spec, command: Array.from({ length: 257 }, () => 'x') }, /command/],
      [{ ...spec, max_runtime_seconds: 0 }, /max_runtime_seconds/],
      [{ ...spec, shell: true }, /shell|Unrecognized/i],
      // Container mode: a reference podman could take for an option, a variable breaking its file of lines, the GPU
      // runtime's own variables; without an image, a command is required.
      [{ ...spec, image: '--privileged' }, /image/],
      [{ ...spec, image: 'busybox --privileged' }, /image/],
      [{ ...spec, image: 'busybox', env: { A: 'x\nLD_PRELOAD=/tmp/x.so' } }, /one line each/],
      [{ ...spec, image: 'busybox', env: { NVIDIA_DRIVER_CAPABILITIES: 'all' } }, /GPU runtime's: refused/],
      [{ max_runtime_seconds: 60 }, /a command is required without an image/],
      // A lone surrogate (JSON's "\ud800") has no UTF-8 form: no object or file is named so.
      [{ ...spec, inputs: [{ key: 'data/set.bin', path: 'set\ud800.bin' }] }, /well-formed Unicode/],
      [{ ...spec, inputs: [{ key: 'data/set\udc00.bin' }] }, /well-formed Unicode/],
    ];
    for (const [workload, why] of bad) {
      const res = await startAs(r.renterUser.headers, { ...r.body, job_id: randomUUID(), workload });
      expect(res.statusCode, JSON.stringify(workload)).toBe(400);
      expect(res.json().code).toBe('VALIDATION_ERROR');
      expect(JSON.stringify(res.json().errors)).toMatch(why);
    }
    const running = await h.db
      .selectFrom('rental_sessions')
      .select('id')
      .where('wallet_id', '=', r.renter.id)
      .execute();
    expect(running).toEqual([]);
  });

  it('leaves a session without a workload billed from its start, as before', async () => {
    const r = await rental();
    const { workload: _none, ...plain } = r.body;
    const started = await startAs(r.renterUser.headers, plain);
    expect(started.json().session).toMatchObject({ workload: false });
    expect(started.json().session.billed_from).toBe(started.json().session.started_at);
    expect((await workloadOf(r.renterUser.headers, started.json().session.id)).statusCode).toBe(404);
  });
});
