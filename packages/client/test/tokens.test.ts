/**
 * The token sources against a token endpoint that answers oddly (a server of the test's own, as a hostile or broken
 * auth would be): a redirect never carries the secret elsewhere, an answer without a lifetime is not asked again at
 * every request, an answer without a token is a failure.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { clientCredentials } from '../src/index.ts';

const servers: ReturnType<typeof createServer>[] = [];
afterAll(() => {
  for (const s of servers) s.close();
});

/** A server answering with `answer`, and the bodies it was sent. */
async function server(answer: (req: IncomingMessage, res: ServerResponse) => void) {
  const bodies: string[] = [];
  const s = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      bodies.push(body);
      answer(req, res);
    });
  });
  servers.push(s);
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  return { url: `http://127.0.0.1:${(s.address() as { port: number }).port}`, bodies };
}

const json = (body: unknown) => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

describe('token sources', () => {
  it('never sends the client secret on to where a redirect points', async () => {
    const elsewhere = await server(json({ access_token: 'stolen', expires_in: 300 }));
    const auth = await server((_req, res) => {
      res.writeHead(307, { location: `${elsewhere.url}/api/v1/auth/token` });
      res.end();
    });
    const token = clientCredentials({ authUrl: auth.url, clientId: 'c', clientSecret: 'the-secret' });
    await expect(token.get()).rejects.toThrow();
    expect(auth.bodies[0]).toContain('the-secret');
    expect(elsewhere.bodies).toEqual([]);
  });

  it('asks once for a token whose answer states no lifetime, and refuses an answer without a token', async () => {
    const unstated = await server(json({ access_token: 'a-token' }));
    const token = clientCredentials({ authUrl: unstated.url, clientId: 'c', clientSecret: 's' });
    for (let i = 0; i < 10; i++) expect(await token.get()).toBe('a-token');
    expect(unstated.bodies).toHaveLength(1);
    const none = await server(json({ token_type: 'Bearer', expires_in: 300 }));
    const empty = clientCredentials({ authUrl: none.url, clientId: 'c', clientSecret: 's' });
    await expect(empty.get()).rejects.toThrow(/answered no access_token/);
  });
});
