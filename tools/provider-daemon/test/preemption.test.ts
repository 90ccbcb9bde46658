/**
 * A preempted interruptible session's workload, against the real auth service, registry and billing, in the real
 * bubblewrap sandbox on a simulated 8-GPU machine: an on-demand start takes the GPUs of a bid; the daemon gives the
 * bid's workload its notice (the file, then SIGTERM) at once, kills it at the deadline billing set
 * (`billing.preemption_grace`, not the machine's shorter `stop_grace`) and not before, and starts the winner's
 * workload on those GPUs only once it is gone. A link the workload planted where the notice goes is replaced, never
 * written through. A workload still preparing when its session is taken back never starts: the winner neither waits
 * for it nor runs beside it. When billing cannot say whether an ended session was preempted, its workload still gets
 * the default notice's length before SIGKILL.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WorkloadRunner } from '../src/workloads/runner.ts';
import { until, useWorkloadRig } from './support/workload-rig.ts';

/** Long enough that "at once" and "not before the deadline" stay apart on a busy machine. */
const GRACE_MS = 10_000;
const rig = useWorkloadRig({ billing: { billing: { preemption_grace: `${GRACE_MS}ms` } } });

/** A renter's bid of 1 on all eight GPUs of `providerId`, its workload `script` (bash): the renter and the session. */
async function bidOf(providerId: string, script: string) {
  const low = await rig.renter();
  const bid = await rig.start(providerId, 8, { command: ['bash', '-c', script], max_runtime_seconds: 3600 }, low, {
    bid: '1',
  });
  expect(bid.statusCode, bid.body).toBe(201);
  return { low, bidId: bid.json().session.id as string };
}

describe('a preempted workload', () => {
  it('gets its notice and SIGTERM at once, SIGKILL at the deadline and not before; the winner runs once it is gone', {
    timeout: 90_000,
  }, async () => {
    const m = await rig.machine();
    await rig.takeBids(m.providerId, '0.5');
    // Where a hostile workload points the notice's name: a path on the host, which the daemon must not write.
    const target = join(rig.dir, `planted-${Date.now()}`);
    const script = [
      `ln -s '${target}' /work/.gpu-notice.json`,
      'trap \'echo "term $(date +%s%3N)"; echo "notice $(cat "$GPU_PLATFORM_NOTICE_FILE")"\' TERM',
      'while true; do echo "tick $(date +%s%3N)"; sleep 0.2; done',
    ].join('\n');
    const { low, bidId } = await bidOf(m.providerId, script);
    const runner = m.runner();
    runner.run();
    try {
      await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'running',
      );
      // On demand, four GPUs: the whole bid (one session of eight) is taken.
      const winner = await rig.rent(m.providerId, 4, { command: ['sh', '-c', 'echo won'], max_runtime_seconds: 60 });
      const taken = await rig.workloadOf(low.headers, bidId);
      expect(taken.session).toMatchObject({ status: 'completed', end_reason: 'preempted', preempted_by: winner.id });
      expect(taken.notice).toMatchObject({ reason: 'preempted' });
      const deadline = Date.parse(taken.notice.deadline);
      expect(deadline - Date.parse(taken.notice.at)).toBe(GRACE_MS);

      const gone = await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'stopped',
        60_000,
      );
      expect(gone).toMatchObject({ state: 'stopped', reason: 'session_ended' });
      const out = readFileSync(join(m.runDir, bidId, 'logs', 'stdout.log'), 'utf8');
      const term = Number(/^term (\d+)$/m.exec(out)?.[1]);
      const notice = JSON.parse(/^notice (.*)$/m.exec(out)?.[1] ?? 'null');
      const ticks = [...out.matchAll(/^tick (\d+)$/gm)].map((t) => Number(t[1]));
      // The notice was there when SIGTERM came, well before the deadline; the workload ran on through its grace
      // (a stop_grace of 500 ms would have killed it at once) and was killed at the deadline, not before.
      expect(notice).toEqual(taken.notice);
      expect(term).toBeLessThan(deadline - GRACE_MS / 2);
      expect(Math.max(...ticks)).toBeGreaterThan(deadline - 3000);
      // The planted link was replaced, not followed.
      expect(existsSync(target)).toBe(false);

      // The winner ran on those GPUs once the preempted workload was gone: at its deadline, not before.
      const done = await until(
        () => rig.workloadOf(winner.headers, winner.id),
        (w) => w.state === 'exited',
        60_000,
      );
      expect(Date.parse(done.running_at)).toBeGreaterThanOrEqual(deadline);
    } finally {
      await runner.stop();
    }
  });

  it('never starts a workload whose session was taken back while it prepared, nor the winner beside it', {
    timeout: 90_000,
  }, async () => {
    const m = await rig.machine();
    await rig.takeBids(m.providerId, '0.5');
    // The machine's GPUs are read just before a workload starts: held there, the bid's launch is caught preparing.
    const { promise: gate, resolve: open } = Promise.withResolvers<void>();
    const gpus = {
      kind: m.deps.gpus.kind,
      read: async () => {
        await gate;
        return m.deps.gpus.read();
      },
    };
    const runner = new WorkloadRunner({ ...m.deps, gpus });
    const low = await rig.renter();
    const bid = await rig.start(
      m.providerId,
      8,
      { command: ['sh', '-c', 'echo "the bid ran"; sleep 600'], max_runtime_seconds: 600 },
      low,
      { bid: '1' },
    );
    expect(bid.statusCode, bid.body).toBe(201);
    const bidId = bid.json().session.id as string;
    runner.run();
    try {
      await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'preparing',
      );
      const winner = await rig.rent(m.providerId, 8, {
        command: ['sh', '-c', 'echo "the winner ran"; sleep 2'],
        max_runtime_seconds: 60,
      });
      // Both launches are under way (the winner's seen by a poll) before the GPUs are read.
      await until(
        () => rig.workloadOf(winner.headers, winner.id),
        (w) => w.state === 'preparing',
      );
      open();
      const won = await until(
        () => rig.workloadOf(winner.headers, winner.id),
        (w) => w.state === 'exited',
        30_000,
      );
      expect(won.exit_code).toBe(0);
      const taken = await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'stopped',
      );
      // It never ran: no running time, nothing billed, not a line of output.
      expect(taken).toMatchObject({ state: 'stopped', running_at: null });
      expect(taken.session).toMatchObject({ end_reason: 'preempted', total_cost: '0.000000' });
      expect(existsSync(join(m.runDir, bidId, 'logs', 'stdout.log'))).toBe(false);
      expect(readFileSync(join(m.runDir, winner.id, 'logs', 'stdout.log'), 'utf8')).toBe('the winner ran\n');
    } finally {
      open();
      await runner.stop();
    }
  });

  it('gives an ended workload at least the default notice when billing cannot say whether it was preempted', {
    timeout: 90_000,
  }, async () => {
    const m = await rig.machine();
    await rig.takeBids(m.providerId, '0.5');
    // Billing through a relay that, once told, fails the ended session's workload read (its notice) with a 503.
    let failFor: string | null = null;
    const relay = createServer(async (req, res) => {
      if (req.method === 'GET' && failFor && req.url === `/api/v1/billing/sessions/${failFor}/workload`) {
        res.writeHead(503, { 'content-type': 'application/problem+json' }).end('{"status":503}');
        return;
      }
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const headers = Object.fromEntries(
        Object.entries(req.headers).flatMap(([k, v]) => (typeof v === 'string' && k !== 'host' ? [[k, v]] : [])),
      );
      const answer = await fetch(`${m.deps.config.billing_url}${req.url}`, {
        method: req.method,
        headers,
        ...(chunks.length ? { body: Buffer.concat(chunks) } : {}),
      });
      res.writeHead(answer.status, Object.fromEntries(answer.headers)).end(Buffer.from(await answer.arrayBuffer()));
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    const { port } = relay.address() as AddressInfo;
    const runner = new WorkloadRunner({
      ...m.deps,
      config: { ...m.deps.config, billing_url: `http://127.0.0.1:${port}` },
    });
    const script = [
      'trap \'echo "term $(date +%s%3N)"; echo "notice $(cat /work/.gpu-notice.json 2>/dev/null || echo none)"\' TERM',
      'while true; do echo "tick $(date +%s%3N)"; sleep 0.2; done',
    ].join('\n');
    const { low, bidId } = await bidOf(m.providerId, script);
    runner.run();
    try {
      await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'running',
      );
      failFor = bidId;
      await rig.rent(m.providerId, 8, { command: ['true'], max_runtime_seconds: 60 });
      const gone = await until(
        () => rig.workloadOf(low.headers, bidId),
        (w) => w.state === 'stopped',
        75_000,
      );
      expect(gone).toMatchObject({ state: 'stopped', reason: 'session_ended' });
      const out = readFileSync(join(m.runDir, bidId, 'logs', 'stdout.log'), 'utf8');
      const term = Number(/^term (\d+)$/m.exec(out)?.[1]);
      const ticks = [...out.matchAll(/^tick (\d+)$/gm)].map((t) => Number(t[1]));
      // SIGTERM, then 30 s (billing.preemption_grace's default) before SIGKILL, not the machine's 500 ms stop_grace;
      // no notice file, since billing said none.
      expect(term).toBeGreaterThan(0);
      expect(Math.max(...ticks) - term).toBeGreaterThan(29_000);
      expect(/^notice (.*)$/m.exec(out)?.[1]).toBe('none');
    } finally {
      await runner.stop();
      relay.close();
    }
  });
});
