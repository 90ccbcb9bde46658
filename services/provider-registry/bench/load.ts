/**
 * A closed-loop load generator: `concurrency` workers repeat an async call for a fixed time; with `intervalMs`, each
 * worker starts a call at most every `intervalMs` (a paced client: one whose next call waits for its schedule, or for
 * the last answer when that came later).
 */

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
  opts: { concurrency: number; seconds: number; warmupSeconds?: number; intervalMs?: number },
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
        const next = t0 + (opts.intervalMs ?? 0) - performance.now();
        if (next > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(next, end - performance.now())));
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
