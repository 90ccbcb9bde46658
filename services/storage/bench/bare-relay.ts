/**
 * The benchmark's reference relay: the least a Node process can do to pass a download on. `node:http` in,
 * `node:http` out, `pipe` between them; no framework, no SDK, no validation, no signing (`pnpm bench storage` starts
 * s3rver with `--allow-anonymous` for it; the service and the SDK still sign every request, and the store checks them). `GET /objects/{bucket}/{key}` answers `{S3_ENDPOINT}/{bucket}/{key}`.
 *
 * Why it exists: on the 2-core benchmark machine a download through any relay is a third busy process beside
 * s3rver and the client. What this relay reaches is what putting a Node process in the path costs there, apart
 * from anything the storage service does; the service's own share of the ratio is the gap between the two.
 * Env: S3_ENDPOINT, PORT. It runs under the service's V8 flags (STORAGE_NODE_FLAGS), so only the code differs.
 */
import { Agent, createServer, request } from 'node:http';

const endpoint = process.env.S3_ENDPOINT;
if (!endpoint) throw new Error('S3_ENDPOINT is required');
const agent = new Agent({ keepAlive: true });

createServer((req, res) => {
  if (req.url === '/health') return void res.end('ok');
  const upstream = request(`${endpoint}${(req.url ?? '').replace(/^\/objects/, '')}`, { agent }, (store) => {
    res.writeHead(store.statusCode ?? 502, {
      'content-type': store.headers['content-type'] ?? 'application/octet-stream',
      ...(store.headers['content-length'] ? { 'content-length': store.headers['content-length'] } : {}),
    });
    store.pipe(res);
  });
  upstream.on('error', () => res.destroy());
  upstream.end();
}).listen(Number(process.env.PORT), '127.0.0.1');
