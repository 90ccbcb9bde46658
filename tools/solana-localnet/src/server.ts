/**
 * A development Solana chain: JSON-RPC over HTTP (POST /, GET /health) and
 * PubSub over WebSocket (on the same port and on port + 1, where web3.js looks
 * for it), executing transactions in litesvm (the real SVM and SPL programs).
 *
 * Usage: tsx tools/solana-localnet/src/server.ts [--port 8899] [--host 127.0.0.1] [--ws-port <port+1>|0]
 *          [--slot-ms 400] [--finality-delay-slots 0] [--state FILE] [--setup] [--dir .data/solana]
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { LocalChain } from './chain.ts';
import { answerBody } from './json-rpc.ts';
import { createHandlers } from './rpc.ts';
import { loadChain, saveChain } from './state-file.ts';
import { createPubSub } from './ws.ts';

const MAX_BODY = 1 << 20;

export interface LocalnetOptions {
  port: number;
  host?: string;
  /**
   * separate WebSocket port (web3.js uses the RPC port + 1, the default); 0: only on the RPC port.
   * An ephemeral RPC port (0) defaults to 0 here: the port after a kernel-chosen one may be anyone's.
   */
  wsPort?: number;
  /** milliseconds per slot; 0: slots advance only through localnet_warp */
  slotMs?: number;
  finalityDelaySlots?: number;
  /** file to load the chain from and save it to on close */
  stateFile?: string;
  log?: (line: string) => void;
}

export interface Localnet {
  chain: LocalChain;
  rpcUrl: string;
  wsUrl: string;
  close(): Promise<void>;
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** Starts the local chain's servers. */
export async function startLocalnet(opts: LocalnetOptions): Promise<Localnet> {
  const host = opts.host ?? '127.0.0.1';
  const log = opts.log ?? (() => {});
  const delay = opts.finalityDelaySlots ?? 0;
  const chain = (opts.stateFile && loadChain(opts.stateFile, delay)) || new LocalChain({ finalityDelaySlots: delay });
  const handlers = createHandlers(chain);
  const pubsub = createPubSub(chain);
  const onError = (e: unknown) => log(`internal error: ${(e as Error).stack ?? String(e)}`);

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET' && req.url === '/health') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        res.writeHead(413).end();
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      if (res.headersSent) return;
      const reply = answerBody(handlers, Buffer.concat(chunks).toString('utf8'), onError);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply));
    });
  };
  const servers: Server[] = [];
  const attach = (server: Server) => {
    server.on('upgrade', (req, socket, head) => {
      pubsub.handleUpgrade(req, socket, head, (ws) => pubsub.emit('connection', ws, req));
    });
    servers.push(server);
  };
  const main = createServer(onRequest);
  attach(main);
  await listen(main, opts.port, host);
  const actualPort = (main.address() as { port: number }).port;
  const wsPort = opts.wsPort ?? (opts.port === 0 ? 0 : actualPort + 1);
  let wsUrl = `ws://${host}:${actualPort}`;
  if (wsPort !== 0) {
    const side = createServer(onRequest);
    attach(side);
    await listen(side, wsPort, host);
    wsUrl = `ws://${host}:${(side.address() as { port: number }).port}`;
  }
  const slotMs = opts.slotMs ?? 400;
  const timer = slotMs > 0 ? setInterval(() => chain.advance(1), slotMs) : undefined;
  timer?.unref();

  return {
    chain,
    rpcUrl: `http://${host}:${actualPort}`,
    wsUrl,
    close: async () => {
      if (timer) clearInterval(timer);
      for (const ws of pubsub.clients) ws.terminate();
      await Promise.all(
        servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()).closeAllConnections())),
      );
      if (opts.stateFile) saveChain(chain, opts.stateFile);
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values } = parseArgs({
    options: {
      port: { type: 'string', default: '8899' },
      host: { type: 'string', default: '127.0.0.1' },
      'ws-port': { type: 'string' },
      'slot-ms': { type: 'string', default: '400' },
      'finality-delay-slots': { type: 'string', default: '0' },
      state: { type: 'string' },
      setup: { type: 'boolean', default: false },
      dir: { type: 'string', default: '.data/solana' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: tsx tools/solana-localnet/src/server.ts [--port 8899] [--host 127.0.0.1] [--ws-port <port+1>|0]\n' +
        '         [--slot-ms 400] [--finality-delay-slots 0] [--state FILE] [--setup] [--dir .data/solana]\n\n' +
        'A development Solana chain: JSON-RPC and PubSub, transactions run in litesvm. --setup creates the platform\n' +
        'mint, the treasury and funded test wallets (files in --dir). See tools/solana-localnet/README.md.\n',
    );
    process.exit(0);
  }
  const log = (line: string) => process.stdout.write(`[solana-localnet] ${line}\n`);
  const net = await startLocalnet({
    port: Number(values.port),
    host: values.host,
    wsPort: values['ws-port'] === undefined ? undefined : Number(values['ws-port']),
    slotMs: Number(values['slot-ms']),
    finalityDelaySlots: Number(values['finality-delay-slots']),
    stateFile: values.state,
    log,
  });
  log(`JSON-RPC on ${net.rpcUrl}, PubSub on ${net.wsUrl} (slot ${net.chain.slot})`);
  if (values.setup) {
    const { runSetup } = await import('./setup.ts'); // loaded only when asked: spl-token slows start-up
    const r = await runSetup({ rpcUrl: net.rpcUrl, wsUrl: net.wsUrl, dir: values.dir });
    log(`setup done: mint ${r.mint} (${r.decimals} decimals), treasury ${r.treasury}, files in ${values.dir}`);
  }
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await net.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
