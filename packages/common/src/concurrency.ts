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
 * What each key (a sender, a client) has in hand: added when work is taken, removed when it is done, a key forgotten
 * once its count is back to zero, so the map holds only the keys with work in hand however many come and go.
 */
export class CountsByKey {
  private readonly counts = new Map<string, number>();

  /** The count of `key` (0 when it has none). */
  of(key: string): number {
    return this.counts.get(key) ?? 0;
  }

  add(key: string, n = 1): void {
    this.counts.set(key, this.of(key) + n);
  }

  remove(key: string, n = 1): void {
    const left = this.of(key) - n;
    if (left > 0) this.counts.set(key, left);
    else this.counts.delete(key);
  }

  /** The keys with some in hand. */
  get size(): number {
    return this.counts.size;
  }
}
