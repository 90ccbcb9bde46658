/**
 * A billing that is not what it should be, for clients' tests: an HTTP proxy in front of a real billing that passes
 * requests through and, when told, answers a request itself (billing unreachable for that request) or rewrites the
 * JSON body of billing's answer (a billing, or a network, that lies).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface BillingProxy {
  url: string;
  /** Answers the request itself when this returns an answer; billing never sees it. */
  block?: (method: string, path: string) => { status: number; body: unknown } | undefined;
  /** Rewrites billing's JSON answer to the request. */
  rewrite?: (method: string, path: string, body: unknown) => unknown;
  /** What reached the proxy: method, path and body of each request. */
  seen: { method: string; path: string; body: string }[];
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive']);

export async function startBillingProxy(upstream: string): Promise<BillingProxy> {
  const proxy = { seen: [] } as unknown as BillingProxy;
  const server: Server = createServer(async (req, res) => {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    proxy.seen.push({ method, path, body: body.toString('utf8') });
    const blocked = proxy.block?.(method, path);
    if (blocked) {
      res.writeHead(blocked.status, { 'content-type': 'application/problem+json' });
      res.end(JSON.stringify(blocked.body));
      return;
    }
    const headers = Object.fromEntries(
      Object.entries(req.headers).filter(
        (e): e is [string, string] => !HOP_BY_HOP.has(e[0]) && typeof e[1] === 'string',
      ),
    );
    const answer = await fetch(`${upstream}${path}`, { method, headers, body: body.length ? body : undefined });
    let text = await answer.text();
    if (proxy.rewrite && answer.headers.get('content-type')?.includes('json')) {
      text = JSON.stringify(proxy.rewrite(method, path, JSON.parse(text)));
    }
    res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' });
    res.end(text);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return Object.assign(proxy, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  });
}
