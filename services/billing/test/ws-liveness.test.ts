/**
 * A renter's WebSocket checked alive (common's keepPinging, as billing's reach streams are): a peer that answers
 * nothing is let go within a few intervals; one that answers, or one that stopped reading but pings on its own (the
 * CLI under `| less`), is kept.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { keepPinging } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';

// Two seconds: long beside any stall of a busy machine's event loop (both ends are in this process).
const EVERY_MS = 2000;
let wss: WebSocketServer;
let url: string;
beforeAll(async () => {
  wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await once(wss, 'listening');
  wss.on('connection', (ws) => keepPinging(ws, EVERY_MS));
  url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`;
});
afterAll(() => {
  for (const client of wss.clients) client.terminate();
  wss.close();
});

/** A client; its close code once it closes (null while open). */
async function client(autoPong: boolean) {
  const ws = new WebSocket(url, { autoPong });
  let code: number | null = null;
  ws.on('close', (c) => {
    code = c;
  });
  await once(ws, 'open');
  return { ws, code: () => code };
}

describe('a WebSocket checked alive', () => {
  it('is let go once its peer answers nothing, within a few intervals', async () => {
    const silent = await client(false);
    await expect.poll(silent.code, { timeout: 10 * EVERY_MS }).toBe(1006);
  });

  it('is kept while its peer answers, or pings on its own without reading', async () => {
    const answering = await client(true);
    const reader = await client(false);
    // Stopped reading (its output blocked), pinging every interval as the CLI does.
    reader.ws.pause();
    const pinger = setInterval(() => reader.ws.ping(), EVERY_MS);
    try {
      await new Promise((r) => setTimeout(r, 6 * EVERY_MS));
      expect(answering.code()).toBeNull();
      expect(reader.code()).toBeNull();
    } finally {
      clearInterval(pinger);
      answering.ws.close();
      reader.ws.terminate();
    }
  });
});
