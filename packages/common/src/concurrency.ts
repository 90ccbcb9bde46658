/**
 * Work on a list with a bound on how much runs at once: `limit` workers each take the next item until none is left,
 * so at most `limit` calls are in flight (HEADs at the store, payouts on chain, database transactions). A call that
 * rejects rejects the whole; the other workers go on with the items left.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/**
 * What a key has in hand, as `CountsByKey` counts it: held by whoever added to it, so that taking work away again
 * needs no second lookup of the key.
 */
export class Tally {
  /** What the key has in hand now. */
  n = 0;
  constructor(readonly key: string) {}
}

/**
 * What each key (a sender, a client) has in hand: added when work is taken, removed when it is done. A key whose count
 * is back to zero is forgotten once as many such keys have gathered as keys with work in hand (and at least
 * `FORGET_AFTER`), so the map holds about the keys with work in hand however many come and go, while a key's count
 * going to zero and up again (a daemon's next message) costs no deletion and insertion of the key each time.
 */
export class CountsByKey {
  private readonly tallies = new Map<string, Tally>();
  /** Tallies at zero still in the map. */
  private atZero = 0;

  /** The count of `key` (0 when it has none). */
  of(key: string): number {
    return this.tallies.get(key)?.n ?? 0;
  }

  /**
   * The tally of `key` (at 0 when it has none): `add` and `remove` take it in the key's place, with no lookup. A key
   * looked up and never added to (a sender refused) is at zero too, and forgotten with the others.
   */
  tally(key: string): Tally {
    let tally = this.tallies.get(key);
    if (!tally) {
      this.forgetIfMany();
      tally = new Tally(key);
      this.tallies.set(key, tally);
      this.atZero++;
    }
    return tally;
  }

  /**
   * Adds `n` to a key's count; answers its tally, for `remove`. A tally at zero may have been forgotten meanwhile:
   * adding to it adds to its key's tally, the one answered.
   */
  add(key: string | Tally, n = 1): Tally {
    const tally = typeof key === 'string' ? this.tally(key) : key.n === 0 ? this.tally(key.key) : key;
    if (tally.n === 0 && n > 0) this.atZero--;
    tally.n += n;
    return tally;
  }

  remove(key: string | Tally, n = 1): void {
    const tally = typeof key === 'string' ? this.tallies.get(key) : key;
    if (!tally || tally.n === 0) return;
    tally.n = Math.max(0, tally.n - n);
    if (tally.n > 0) return;
    this.atZero++;
    this.forgetIfMany();
  }

  /** The keys with some in hand. */
  get size(): number {
    return this.tallies.size - this.atZero;
  }

  /** Forgets the tallies at zero once there are as many as keys with work in hand, and at least `FORGET_AFTER`. */
  private forgetIfMany(): void {
    if (this.atZero >= Math.max(FORGET_AFTER, this.tallies.size - this.atZero)) this.forget();
  }

  /** Drops the tallies at zero (one still held is made again, at zero, by its key's next `tally`). */
  private forget(): void {
    for (const tally of this.tallies.values()) if (tally.n === 0) this.tallies.delete(tally.key);
    this.atZero = 0;
  }
}

/** The fewest keys at zero that are worth a sweep of the map. */
const FORGET_AFTER = 1_024;
