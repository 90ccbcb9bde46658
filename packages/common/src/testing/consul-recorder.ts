/**
 * A small recording stand-in for the Consul agent's service API (the real
 * agent cannot be installed on these machines). It answers
 * PUT /v1/agent/service/register and PUT /v1/agent/service/deregister/:id
 * like the agent, keeps the registered services, and records every call.
 * GET /_recorded returns what it saw. Given an ACL token, it refuses every
 * call without that `X-Consul-Token` with 403 "Permission denied", as an agent
 * with ACLs on and a deny-by-default policy does.
 */
import { createServer, type Server } from 'node:http';

export interface RecordedCall {
  method: string;
  path: string;
  body: unknown;
  at: string;
  /** The `X-Consul-Token` the call carried, if any. */
  token?: string;
}

export class ConsulRecorder {
  readonly calls: RecordedCall[] = [];
  readonly services = new Map<string, Record<string, unknown>>();
  private server?: Server;

  /** `aclToken`: the one token it accepts (ACLs on, deny by default); none: every call is accepted. */
  constructor(private readonly opts: { aclToken?: string } = {}) {}

  async start(port = 0, host = '127.0.0.1'): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {}
        const path = (req.url ?? '/').split('?')[0] ?? '/';
        if (path === '/_recorded') {
          res.setHeader('content-type', 'application/json');
          res.end(JSON.stringify({ calls: this.calls, services: Object.fromEntries(this.services) }));
          return;
        }
        const token = req.headers['x-consul-token'];
        this.calls.push({
          method: req.method ?? '',
          path,
          body,
          at: new Date().toISOString(),
          ...(typeof token === 'string' ? { token } : {}),
        });
        if (this.opts.aclToken !== undefined && token !== this.opts.aclToken) {
          res.statusCode = 403;
          res.end(token === undefined ? 'Permission denied: anonymous token lacks permission' : 'ACL not found');
          return;
        }
        if (req.method === 'PUT' && path === '/v1/agent/service/register') {
          const svc = body as Record<string, unknown>;
          this.services.set(String(svc.ID ?? svc.Name), svc);
          res.end();
          return;
        }
        const dereg = /^\/v1\/agent\/service\/deregister\/(.+)$/.exec(path);
        if (req.method === 'PUT' && dereg) {
          this.services.delete(decodeURIComponent(dereg[1] ?? ''));
          res.end();
          return;
        }
        if (req.method === 'GET' && path === '/v1/agent/services') {
          res.setHeader('content-type', 'application/json');
          res.end(JSON.stringify(Object.fromEntries(this.services)));
          return;
        }
        res.statusCode = 404;
        res.end('not found');
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, host, resolve));
    const addr = this.server.address();
    return `${host}:${typeof addr === 'object' && addr ? addr.port : port}`;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
