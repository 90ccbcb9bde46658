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
