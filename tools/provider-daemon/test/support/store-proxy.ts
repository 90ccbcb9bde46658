/**
 * A proxy in front of the tests' S3 server, for the storage service's presigned URLs (its `public_endpoint`): what a
 * daemon sends through them reaches the store as it was sent, until the test has the proxy cut the uploads of some
 * keys. A cut upload is read whole from its sender, half of it goes on to the store, and then both connections are
 * dropped: the store saw a PUT that broke off midway, and the sender a connection reset (an upload it tries again).
 *
 *   const proxy = await startStoreProxy(testEnv.s3Endpoint);
 *   proxy.cut((key) => key.includes('/checkpoints/'));   // proxy.cuts: the bodies cut so far
 */
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StoreProxy {
  /** Where presigned URLs should point (`http://127.0.0.1:<port>`). */
  url: string;
  /** Cuts every PUT whose path (bucket and key, decoded) `which` says yes to; null: cuts none any more. */
  cut(which: ((path: string) => boolean) | null): void;
  /** The PUTs cut so far: their paths and whole bodies, as their senders sent them. */
  cuts: { path: string; body: Buffer }[];
  close(): Promise<void>;
}

export async function startStoreProxy(storeUrl: string): Promise<StoreProxy> {
  const store = new URL(storeUrl);
  let which: ((path: string) => boolean) | null = null;
  const cuts: StoreProxy['cuts'] = [];
  const server: Server = createServer((req, res) => {
    // The signature covers the host the URL names (this proxy's): it goes on as it came. `Expect` was answered here.
    const { expect: _continue, ...headers } = req.headers;
    const upstream = request(
      { host: store.hostname, port: store.port, method: req.method, path: req.url, headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    const path = decodeURIComponent(req.url ?? '');
    if (req.method !== 'PUT' || !which?.(path)) {
      req.pipe(upstream);
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      cuts.push({ path, body });
      upstream.write(body.subarray(0, Math.floor(body.length / 2)), () => {
        upstream.destroy();
        req.socket.destroy();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cut(w) {
      which = w;
    },
    cuts,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
