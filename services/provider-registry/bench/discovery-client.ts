/**
 * The scheduler of the registry benchmark's fleet rows (bench/run.ts): a process of its own, as a scheduler is, so that
 * the latency it measures is not stretched by the benchmark process's own pauses (its heap holds the fleet's rows, and
 * over HTTP it sends the fleet's heartbeats: its collections are long and frequent, and each one that falls inside a
 * discovery request is counted as that request's latency).
 *
 * Reads its job as one JSON line on stdin (`Job`), prints `ready`, then for each line `{"seconds": n}` runs the query
 * with one client (paced, `intervalMs` apart; its first second a warm-up) for `n` seconds and prints the `LoadResult`
 * as one JSON line. Ends when stdin ends.
 */
import { createInterface } from 'node:readline';
import { BenchHttpClient } from './http-client.ts';
import { runLoad } from './load.ts';

interface Job {
  port: number;
  /** `Bearer <token>` */
  authorization: string;
  /** The query's path and query string. */
  path: string;
  /** Milliseconds between one call's start and the next's; 0: back to back. */
  intervalMs: number;
}

let job: Job | undefined;
let http: BenchHttpClient | undefined;
for await (const line of createInterface({ input: process.stdin })) {
  if (!job || !http) {
    job = JSON.parse(line) as Job;
    http = new BenchHttpClient(job.port, job.authorization);
    process.stdout.write('ready\n');
    continue;
  }
  const { path, intervalMs } = job;
  const client = http;
  const { seconds } = JSON.parse(line) as { seconds: number };
  const result = await runLoad(async () => (await client.request('GET', path)) === 200, {
    concurrency: 1,
    seconds,
    warmupSeconds: 1,
    ...(intervalMs > 0 ? { intervalMs } : {}),
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
http?.close();
