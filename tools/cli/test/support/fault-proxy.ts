/**
 * A plain HTTP proxy between `gpu` and the platform that remembers what it was asked and, when told, does to one
 * answer what a network does: hands on only its first bytes and then nothing more (a stalled transfer), or that many
 * and then cuts the connection. It can also hold the requests of one kind until a number of them wait at once (or a
 * generous deadline passes), and counts how many were under way at most: how a test sees that a copy runs its
 * transfers side by side, and how many. It can refuse requests of one kind itself, as the platform would (a file of a
 * folder copy refused, the others not), and run another client's change just before a request passes.
 *
 *   const proxy = await faultProxy(gatewayUrl);
 *   proxy.limitNext((r) => r.method === 'GET', { bytes: 1024, mode: 'stall' });
 */
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request as the proxy saw it. */
export interface Seen {
  method: string;
  /** The path and query, as sent (keys encoded: `/objects/a%2Fb.bin`). */
  url: string;
  range: string | undefined;
}

type Match = (r: Seen) => boolean;

interface Gate {
  match: Match;
  count: number;
  waiting: (() => void)[];
  open: boolean;
  underWay: number;
  most: number;
  timer?: NodeJS.Timeout;
}

export interface FaultProxy {
  url: string;
  /** Every request, in the order they came. */
  seen: Seen[];
  /** The next answer to a matching request: only `bytes` of its body, then a stall or a cut connection. */
  limitNext(match: Match, opts: { bytes: number; mode: 'stall' | 'cut' }): void;
  /**
   * Holds matching requests until `count` wait at once (or `deadlineMs` passed), then lets them and all after them
   * through; `most()` answers how many matching requests were under way at once; `end()` takes the gate away.
   */
  gate(match: Match, count: number, deadlineMs?: number): { most(): number; end(): void };
  /**
   * Runs `first` before the next matching request is passed on (another client's change landing just before it);
   * what it threw is in `failures`.
   */
  beforeNext(match: Match, first: () => Promise<unknown>): void;
  /** What the changes run by `beforeNext` threw. */
  failures: unknown[];
  /**
   * Answers every matching request with `status` and a problem of `code` (never passed on) until `end()`; with
   * `after`, each refusal once it has resolved (what else is under way lands first).
   */
  refuse(match: Match, status: number, code: string, opts?: { after?: () => Promise<unknown> }): { end(): void };
  close(): Promise<void>;
}

export async function faultProxy(target: string): Promise<FaultProxy> {
  let limit: { match: Match; bytes: number; mode: 'stall' | 'cut' } | undefined;
  let gate: Gate | undefined;
  let before: { match: Match; first: () => Promise<unknown> } | undefined;
  const failures: unknown[] = [];
  const refusals = new Set<{ match: Match; status: number; code: string; after?: () => Promise<unknown> }>();
  const seen: Seen[] = [];

  const server = createServer((req, res) => {
    const entry: Seen = { method: req.method ?? 'GET', url: req.url ?? '/', range: req.headers.range };
    seen.push(entry);
    const refusal = [...refusals].find((r) => r.match(entry));
    if (refusal) {
      // The request's body read and dropped, as a server that refuses it after reading would.
      req.resume();
      req.once('end', async () => {
        await refusal.after?.().catch((err: unknown) => failures.push(err));
        res.writeHead(refusal.status, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ status: refusal.status, code: refusal.code, detail: `refused by the test's proxy` }));
      });
      return;
    }
    const capped = limit?.match(entry) ? limit : undefined;
    if (capped) limit = undefined;
    // Once a limited answer stopped, its upstream's end is the proxy's doing, not a failure to pass on.
    let stopped = false;
    const forward = () => {
      const upstream = request(new URL(entry.url, target), { method: entry.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        if (!capped) {
          answer.pipe(res);
          return;
        }
        let sent = 0;
        answer.on('error', () => {});
        answer.on('data', (chunk: Buffer) => {
          const part = chunk.subarray(0, Math.max(0, capped.bytes - sent));
          if (part.length === 0) return;
          sent += part.length;
          res.write(part);
          if (sent < capped.bytes) return;
          stopped = true;
          answer.destroy();
          // A stall: the caller's connection stays open, and nothing more comes.
          if (capped.mode === 'cut') res.destroy();
        });
      });
      upstream.on('error', () => {
        if (!stopped) res.destroy();
      });
      req.pipe(upstream);
    };
    const preceded = before?.match(entry) ? before : undefined;
    if (preceded) {
      before = undefined;
      // Held (its body too) until the change before it has landed.
      req.pause();
      // A change that failed is the test's to see (its own expect); the request goes on all the same.
      preceded.first().then(forward, (err: unknown) => {
        failures.push(err);
        forward();
      });
      return;
    }
    const held = gate?.match(entry) ? gate : undefined;
    if (!held) {
      forward();
      return;
    }
    held.underWay += 1;
    held.most = Math.max(held.most, held.underWay);
    res.once('close', () => {
      held.underWay -= 1;
    });
    if (held.open) {
      forward();
      return;
    }
    held.waiting.push(forward);
    if (held.waiting.length >= held.count) release(held);
  });

  const release = (g: Gate) => {
    clearTimeout(g.timer);
    g.open = true;
    for (const go of g.waiting.splice(0)) go();
  };

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    failures,
    limitNext(match, opts) {
      limit = { match, ...opts };
    },
    gate(match, count, deadlineMs = 20_000) {
      if (gate) release(gate);
      const g: Gate = { match, count, waiting: [], open: false, underWay: 0, most: 0 };
      g.timer = setTimeout(() => release(g), deadlineMs);
      gate = g;
      return {
        most: () => g.most,
        end() {
          release(g);
          if (gate === g) gate = undefined;
        },
      };
    },
    beforeNext(match, first) {
      before = { match, first };
    },
    refuse(match, status, code, opts = {}) {
      const refusal = { match, status, code, after: opts.after };
      refusals.add(refusal);
      return { end: () => refusals.delete(refusal) };
    },
    async close() {
      if (gate) release(gate);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
