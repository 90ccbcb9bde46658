/** A small closed-loop HTTP load generator over keep-alive connections (loopback only). */
import http from 'node:http';

export interface LoadResult {
  requests: number;
  ok: number;
  seconds: number;
  perSecond: number;
}

export interface LoadOptions {
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  /** A body per request (called each time, so requests can vary). */
  body?: () => string;
  concurrency: number;
  durationMs: number;
  expectStatus?: number;
}

/** Runs `concurrency` loops, each sending the next request when the last answered, for `durationMs`. */
export async function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const target = new URL(opts.url);
  const expectStatus = opts.expectStatus ?? 200;
  let requests = 0;
  let ok = 0;
  const started = performance.now();
  const deadline = started + opts.durationMs;
  const once = () =>
    new Promise<void>((resolve, reject) => {
      const body = opts.body?.();
      const req = http.request(
        {
          host: target.hostname,
          port: target.port,
          path: target.pathname,
          method: opts.method ?? 'GET',
          agent,
          headers: {
            ...opts.headers,
            ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}),
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            requests++;
            if (res.statusCode === expectStatus) ok++;
            resolve();
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  await Promise.all(
    Array.from({ length: opts.concurrency }, async () => {
      while (performance.now() < deadline) await once();
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  return { requests, ok, seconds, perSecond: ok / seconds };
}
