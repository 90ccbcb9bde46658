/**
 * What one round of the job placer knows of machines' free GPUs beyond the market's answer (domain/jobs/place.ts):
 * the registry's market hears of a start a message after it, so within a round the same machine may be offered with
 * GPUs the round's own starts already took.
 */
import { describe, expect, it } from 'vitest';
import { RoundCapacity } from '../src/domain/jobs/place.ts';

const machine = (freeGpus: number) => ({ providerId: 'm-1', freeGpus });

describe("a placer round's capacity", () => {
  it('gives no more GPUs of a machine than it was offered with, however often the lagging market offers them', () => {
    const round = new RoundCapacity();
    for (let i = 0; i < 3; i++) expect(round.take(machine(8), 2)).toBe(true);
    // The market still shows 8 free: the round knows of 2.
    expect(round.take(machine(8), 4)).toBe(false);
    expect(round.take(machine(8), 2)).toBe(true);
    expect(round.take(machine(8), 1)).toBe(false);
  });

  it('believes the market when it offers fewer than the round counted', () => {
    const round = new RoundCapacity();
    expect(round.take(machine(8), 1)).toBe(true);
    // Another placer took 6 meanwhile, and the market shows it: 1 left, not 7.
    expect(round.take(machine(1), 2)).toBe(false);
    expect(round.take(machine(1), 1)).toBe(true);
  });

  it('gives back the GPUs of a start that did not happen, and offers a machine that refused for want of GPUs no more', () => {
    const round = new RoundCapacity();
    expect(round.take(machine(4), 4)).toBe(true);
    round.giveBack('m-1', 4);
    expect(round.take(machine(4), 4)).toBe(true);
    round.giveBack('m-1', 4);
    round.exhausted('m-1');
    expect(round.take(machine(4), 1)).toBe(false);
    // Another machine is another count.
    expect(round.take({ providerId: 'm-2', freeGpus: 4 }, 4)).toBe(true);
  });
});
