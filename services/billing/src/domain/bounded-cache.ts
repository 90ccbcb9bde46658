/**
 * A map that starts over when it is full: for values that never change once
 * known (a wallet's ledger account IDs, the JSON of a rate set), so a stale
 * entry is impossible and forgetting everything now and then costs only a
 * re-read. Owned by the context an app builds (context.ts), never by a module.
 */
export class BoundedCache<V> {
  private readonly map = new Map<string, V>();

  constructor(readonly limit: number) {}

  get(key: string): V | undefined {
    return this.map.get(key);
  }

  /** Stores `value`, first forgetting everything when the cache is full. */
  set(key: string, value: V): void {
    if (this.map.size >= this.limit) this.map.clear();
    this.map.set(key, value);
  }

  /** Makes room for `count` new entries (forgetting everything when they would not fit). */
  reserve(count: number): void {
    if (this.map.size + count > this.limit) this.map.clear();
  }

  get size(): number {
    return this.map.size;
  }
}
