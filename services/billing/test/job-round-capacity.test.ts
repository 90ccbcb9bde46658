/**
 * What one round of the job placer knows of machines' free GPUs beyond the market's answer (domain/jobs/place.ts):
 * the registry's market hears of a start a message after it, so within a round the same machine may be offered with
 * GPUs the round's own starts already took.
 */
import { describe, expect, it } from 'vitest';
import { RoundCapacity } from '../src/domain/jobs/place.ts';

const h100 = (freeGpus: number, providerId = 'm-1') => ({ providerId, modelKey: 'nvidia-tesla-h100', freeGpus });

describe("a placer round's capacity", () => {
  it('gives no more GPUs of a machine than it was offered with, however often the lagging market offers them', () => {
    const round = new RoundCapacity();
    for (let i = 0; i < 3; i++) expect(round.take(h100(8), 2)).toBe(true);
    // The market still shows 8 free: the round knows of 2.
    expect(round.take(h100(8), 4)).toBe(false);
    expect(round.take(h100(8), 2)).toBe(true);
    expect(round.take(h100(8), 1)).toBe(false);
  });

  it('believes the market when it offers fewer than the round counted', () => {
    const round = new RoundCapacity();
    expect(round.take(h100(8), 1)).toBe(true);
    // Another placer took 6 meanwhile, and the market shows it: 1 left, not 7.
    expect(round.take(h100(1), 2)).toBe(false);
    expect(round.take(h100(1), 1)).toBe(true);
  });

  it('gives back the GPUs of a start that did not happen', () => {
    const round = new RoundCapacity();
    expect(round.take(h100(4), 4)).toBe(true);
    round.giveBack(h100(4), 4);
    expect(round.take(h100(4), 4)).toBe(true);
  });

  it('takes a refused start to mean fewer free than it asked for, not none', () => {
    const round = new RoundCapacity();
    expect(round.take(h100(8), 4)).toBe(true);
    round.refused(h100(8), 4);
    // Fewer than 4: a start of 4 is not tried again this round, one of 3 is.
    expect(round.take(h100(8), 4)).toBe(false);
    expect(round.take(h100(8), 3)).toBe(true);
    expect(round.take(h100(8), 1)).toBe(false);
  });

  it("counts each of a machine's GPU models, and each machine, on its own", () => {
    const round = new RoundCapacity();
    expect(round.take(h100(2), 2)).toBe(true);
    expect(round.take({ providerId: 'm-1', modelKey: 'nvidia-a100', freeGpus: 4 }, 4)).toBe(true);
    expect(round.take(h100(4, 'm-2'), 4)).toBe(true);
    expect(round.take(h100(2), 1)).toBe(false);
  });
});
