/** A closed-loop load generator: `concurrency` workers repeat an async call for a fixed time. */

export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p99: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function runLoad(
  call: (i: number) => Promise<boolean>,
  opts: { concurrency: number; seconds: number; warmupSeconds?: number },
): Promise<LoadResult> {
  const warmupEnd = performance.now() + (opts.warmupSeconds ?? 1) * 1000;
  let counter = 0;
  while (performance.now() < warmupEnd) {
    await Promise.all(Array.from({ length: opts.concurrency }, () => call(counter++)));
  }
  const latencies: number[] = [];
  let errors = 0;
  const start = performance.now();
  const end = start + opts.seconds * 1000;
  await Promise.all(
    Array.from({ length: opts.concurrency }, async () => {
      while (performance.now() < end) {
        const t0 = performance.now();
        const ok = await call(counter++).catch(() => false);
        latencies.push(performance.now() - t0);
        if (!ok) errors += 1;
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    requests: latencies.length,
    errors,
    seconds,
    perSecond: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
  };
}
