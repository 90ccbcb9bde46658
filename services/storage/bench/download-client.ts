/**
 * The benchmark's download client, in a process of its own: a download's speed depends on the client's
 * garbage collector, and the benchmark process has by then uploaded 2 GiB through lib-storage, after which
 * its collector ran several times the work per downloaded GiB. Every kind of download runs here, so all paths
 * get the same, fresh client (run.ts starts it under the service's V8 flags, for the same reason).
 * Protocol (IPC): receives { kind: 'direct' | 'service' | 'relay' | 'redirect', bucket, key, url? }; answers
 * { ms, bytes, cpuSeconds }.
 * Env: BENCH_AUTHORIZATION, the `authorization` header (`Bearer <token>`) of every request to the service; the relay
 * gets it too (and ignores it), so that the client does the same on both relayed paths.
 */
import { request } from 'node:http';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { directS3Client } from './s3-client.ts';

export interface DownloadOrder {
  /**
   * Straight to s3rver with the SDK, through the storage service, through the reference relay (bare-relay.ts), or
   * by redirect: the service answers `?redirect=true` with a presigned GET URL, which the client follows to s3rver.
   */
  kind: 'direct' | 'service' | 'relay' | 'redirect';
  bucket: string;
  key: string;
  /** The service's or the relay's base URL (both serve `GET /objects/{bucket}/{key}`), for kinds other than 'direct'. */
  url?: string;
}

export interface DownloadResult {
  ms: number;
  bytes: number;
  /** CPU seconds (user + system) this process spent on the download. */
  cpuSeconds: number;
}

const s3 = directS3Client();
const authorization = process.env.BENCH_AUTHORIZATION;
const headers: Record<string, string> = authorization ? { authorization } : {};

async function drain(stream: AsyncIterable<Uint8Array>): Promise<number> {
  let n = 0;
  for await (const chunk of stream) n += chunk.length;
  return n;
}

function download(order: DownloadOrder): Promise<number> {
  if (order.kind === 'direct') {
    return s3
      .send(new GetObjectCommand({ Bucket: order.bucket, Key: order.key }))
      .then((out) => drain(out.Body as AsyncIterable<Uint8Array>));
  }
  const url = `${order.url}/objects/${order.bucket}/${order.key}`;
  if (order.kind === 'redirect') {
    return get(`${url}?redirect=true`, headers, 307).then((location) => get(location, {}, 200));
  }
  return get(url, headers, 200);
}

/**
 * A GET with node:http, as the SDK uses for the direct download (the client must not be what differs): resolves
 * with the bytes read for a 200, with the Location header for a 307.
 */
function get<S extends 200 | 307>(
  url: string,
  headers: Record<string, string>,
  status: S,
): Promise<S extends 307 ? string : number>;
function get(url: string, headers: Record<string, string>, status: 200 | 307): Promise<number | string> {
  return new Promise((resolve, reject) => {
    request(url, { headers }, (res) => {
      if (res.statusCode !== status) {
        res.resume();
        return reject(new Error(`GET ${url.split('?')[0]}: ${res.statusCode}, ${status} expected`));
      }
      if (status === 307) {
        res.resume();
        return res.headers.location ? resolve(res.headers.location) : reject(new Error('307 without Location'));
      }
      drain(res).then(resolve, reject);
    })
      .on('error', reject)
      .end();
  });
}

process.on('message', (order: DownloadOrder) => {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  download(order).then(
    (bytes) => {
      const ms = performance.now() - t0;
      const used = process.cpuUsage(cpu);
      process.send?.({ ms, bytes, cpuSeconds: (used.user + used.system) / 1e6 } satisfies DownloadResult);
    },
    (err: Error) => process.send?.({ error: err.message }),
  );
});
process.on('disconnect', () => {
  s3.destroy();
  process.exit(0);
});
process.send?.({ ready: true });
