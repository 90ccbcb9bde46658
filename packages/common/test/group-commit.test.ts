import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../src/index.ts';

/** A batch function that records its batches and answers once released. */
function recorder(answer: (n: number) => number | Error = (n) => n * 10) {
  const batches: number[][] = [];
  const gates: (() => void)[] = [];
  const run = async (items: number[]) => {
    batches.push(items);
    await new Promise<void>((resolve) => gates.push(resolve));
    return items.map(answer);
  };
  const release = async () => {
    await new Promise((r) => setImmediate(r));
    for (const open of gates.splice(0)) open();
    await new Promise((r) => setImmediate(r));
  };
  return { batches, run, release };
}

describe('GroupCommit', () => {
  it('sends a lone item on the next turn and groups what arrives while a batch runs', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxInFlight: 1 });
    const first = gc.submit(1);
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1]]);
    const rest = [2, 3, 4].map((n) => gc.submit(n));
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toHaveLength(1); // queued behind the running batch
    await r.release();
    expect(r.batches).toEqual([[1], [2, 3, 4]]);
    await r.release();
    expect(await Promise.all([first, ...rest])).toEqual([10, 20, 30, 40]);
    expect(gc.stats).toEqual({ batches: 2, items: 4, largestBatch: 3, held: 0 });
  });

  it("submits several at once: one answer per item in order, across batches, each item's error its own", async () => {
    const r = recorder((n) => (n === 3 ? new Error('three') : n * 10));
    const gc = new GroupCommit(r.run, { maxBatch: 2, maxInFlight: 1, maxQueued: 4 });
    const all = gc.submitAll([1, 2, 3, 4, 5]);
    const none = await gc.submitAll([]);
    expect(none).toEqual([]);
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1, 2]]);
    await r.release();
    await r.release();
    const out = await all;
    expect(out.slice(0, 2)).toEqual([10, 20]);
    expect(out[2]).toMatchObject({ message: 'three' });
    expect(out[3]).toBe(40);
    // The queue held four: the fifth was refused at once, as `submit` refuses one.
    expect(out[4]).toMatchObject({ code: 'OVERLOADED', kind: 'unavailable' });
    expect(r.batches).toEqual([
      [1, 2],
      [3, 4],
    ]);
    const failing = new GroupCommit<number, number>(async () => {
      throw 'the database is away';
    });
    expect(await failing.submitAll([1, 2])).toEqual([
      new Error('the database is away'),
      new Error('the database is away'),
    ]);
  });

  it('caps batches at maxBatch and runs up to maxInFlight at once', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxBatch: 2, maxInFlight: 2 });
    const all = [1, 2, 3, 4, 5, 6].map((n) => gc.submit(n));
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([
      [1, 2],
      [3, 4],
    ]);
    await r.release();
    expect(r.batches).toEqual([
      [1, 2],
      [3, 4],
      [5, 6],
    ]);
    await r.release();
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40, 50, 60]);
  });

  it('runs up to maxInFlightFull batches only while full ones wait, and partial ones within maxInFlight', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxBatch: 2, maxInFlight: 1, maxInFlightFull: 3 });
    const all = [1, 2, 3, 4, 5, 6, 7].map((n) => gc.submit(n));
    await new Promise((res) => setImmediate(res));
    // Three full batches leave at once; the seventh item, a partial batch, waits for the one slot partial ones have.
    expect(r.batches).toEqual([
      [1, 2],
      [3, 4],
      [5, 6],
    ]);
    await r.release();
    expect(r.batches.at(-1)).toEqual([7]);
    await r.release();
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40, 50, 60, 70]);

    // A light load: one partial batch at a time, however many slots full batches would have.
    const light = recorder();
    const lone = new GroupCommit(light.run, { maxBatch: 4, maxInFlight: 1, maxInFlightFull: 3 });
    const first = lone.submit(1);
    await new Promise((res) => setImmediate(res));
    const more = [2, 3].map((n) => lone.submit(n));
    await new Promise((res) => setImmediate(res));
    expect(light.batches).toEqual([[1]]);
    await light.release();
    expect(light.batches).toEqual([[1], [2, 3]]);
    await light.release();
    expect(await Promise.all([first, ...more])).toEqual([10, 20, 30]);
  });

  it('refuses an item beyond maxQueued at once with 503 OVERLOADED, and takes items again once the queue drains', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxInFlight: 1, maxQueued: 2 });
    const first = gc.submit(1);
    await new Promise((res) => setImmediate(res)); // 1 is in the database; 2 and 3 wait
    const waiting = [gc.submit(2), gc.submit(3)];
    await expect(gc.submit(4)).rejects.toMatchObject({ code: 'OVERLOADED', kind: 'unavailable' });
    await r.release();
    await r.release();
    expect(await Promise.all([first, ...waiting])).toEqual([10, 20, 30]);
    const again = gc.submit(5);
    await r.release();
    expect(await again).toBe(50);
  });

  it('rejects only the items answered with an Error, and every item when the batch throws', async () => {
    const gc = new GroupCommit(async (items: number[]) => items.map((n) => (n % 2 ? new Error(`odd ${n}`) : n)));
    const results = await Promise.allSettled([1, 2, 3].map((n) => gc.submit(n)));
    expect(results.map((s) => s.status)).toEqual(['rejected', 'fulfilled', 'rejected']);
    expect((results[0] as PromiseRejectedResult).reason.message).toBe('odd 1');

    const failing = new GroupCommit<number, number>(async () => {
      throw new Error('database away');
    });
    const settled = await Promise.allSettled([1, 2].map((n) => failing.submit(n)));
    expect(settled.every((s) => s.status === 'rejected' && s.reason.message === 'database away')).toBe(true);
    // It keeps working after a failed batch.
    const ok = new GroupCommit(async (items: number[]) => items);
    expect(await ok.submit(7)).toBe(7);
  });

  it('keeps the next batch back while a read holds it, until the read ends, and lets running batches finish', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxInFlight: 2, maxHoldMs: 60_000 });
    const running = gc.submit(1);
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1]]);
    const release = gc.hold();
    const queued = [2, 3].map((n) => gc.submit(n));
    await r.release(); // the running batch finishes while the hold is taken
    expect(await running).toBe(10);
    expect(r.batches).toEqual([[1]]); // 2 and 3 wait for the read, though a slot is free
    release();
    release(); // a second call changes nothing
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1], [2, 3]]);
    await r.release();
    expect(await Promise.all(queued)).toEqual([20, 30]);
    expect(gc.stats).toEqual({ batches: 2, items: 3, largestBatch: 2, held: 1 });
    // Nothing kept back, nothing counted: the next one leaves on the next turn.
    const next = gc.submit(4);
    await new Promise((res) => setImmediate(res));
    expect(r.batches.at(-1)).toEqual([4]);
    await r.release();
    expect(await next).toBe(40);
    expect(gc.stats.held).toBe(1);
  });

  it('lets held items go once they fill a batch, or once they have waited maxHoldMs however many holds follow', async () => {
    const r = recorder();
    const gc = new GroupCommit(r.run, { maxBatch: 3, maxHoldMs: 60_000 });
    const release = gc.hold();
    const full = [1, 2, 3, 4].map((n) => gc.submit(n));
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1, 2, 3]]); // a full batch leaves; the fourth item waits for the read
    await r.release();
    await new Promise((res) => setImmediate(res));
    expect(r.batches).toEqual([[1, 2, 3]]);
    release();
    await r.release();
    await r.release();
    expect(await Promise.all(full)).toEqual([10, 20, 30, 40]);

    // Reads that follow one another without a gap (a hold always taken) keep a batch back maxHoldMs at most.
    const timed = recorder();
    const bounded = new GroupCommit(timed.run, { maxHoldMs: 40 });
    let holding = bounded.hold();
    const started = performance.now();
    const item = bounded.submit(5);
    const relay = setInterval(() => {
      const next = bounded.hold();
      holding();
      holding = next;
    }, 5);
    while (timed.batches.length === 0) await new Promise((res) => setTimeout(res, 5));
    const waited = performance.now() - started;
    clearInterval(relay);
    holding();
    await timed.release();
    expect(await item).toBe(50);
    expect(waited).toBeGreaterThanOrEqual(35);
    expect(bounded.stats.held).toBe(1);

    // With maxHoldMs 0 a hold keeps nothing back, and no batch counts as held.
    const open = recorder();
    const unheld = new GroupCommit(open.run, { maxHoldMs: 0 });
    const freed = unheld.hold();
    const at = unheld.submit(6);
    await new Promise((res) => setImmediate(res));
    expect(open.batches).toEqual([[6]]);
    freed();
    await open.release();
    expect(await at).toBe(60);
    expect(unheld.stats.held).toBe(0);
  });

  it('refuses a batch function that answers the wrong number of results', async () => {
    const gc = new GroupCommit(async (_items: number[]) => [1, 2, 3]);
    await expect(gc.submit(1)).rejects.toThrow(/3 results for 1 items/);
  });
});
