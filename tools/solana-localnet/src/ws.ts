/**
 * The PubSub (WebSocket) side of the RPC: `signatureSubscribe` (what
 * `Connection.confirmTransaction` waits on) and `slotSubscribe`, with their
 * unsubscribe calls. One-shot signature subscriptions end after notifying.
 */
import { type WebSocket, WebSocketServer } from 'ws';
import type { Commitment, LocalChain, TxRecord } from './chain.ts';

type Reply = Record<string, unknown>;

/** A WebSocket server (attach it to HTTP `upgrade` events) serving subscriptions on `chain`. */
export function createPubSub(chain: LocalChain): WebSocketServer {
  chain.setMaxListeners(0);
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1 << 20 });
  let nextId = 1;

  wss.on('connection', (ws: WebSocket) => {
    const subs = new Map<number, () => void>();
    const send = (msg: Reply) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
    };
    const notify = (method: string, subscription: number, result: unknown) =>
      send({ jsonrpc: '2.0', method, params: { result, subscription } });

    const subscribeSignature = (id: unknown, params: unknown[]) => {
      const sig = params[0];
      if (typeof sig !== 'string')
        return send({ jsonrpc: '2.0', id, error: { code: -32602, message: 'Invalid params' } });
      const c = (params[1] ?? {}) as { commitment?: string };
      const commitment: Commitment =
        c.commitment === 'processed' || c.commitment === 'confirmed' ? c.commitment : 'finalized';
      const subId = nextId++;
      send({ jsonrpc: '2.0', id, result: subId });
      const fire = (rec: TxRecord) =>
        notify('signatureNotification', subId, { context: { slot: chain.slot }, value: { err: rec.err } });
      const existing = chain.history.get(sig);
      if (existing && chain.visibleAt(existing, commitment)) return fire(existing);
      const event = commitment === 'finalized' ? 'finalized' : 'transaction';
      const listener = (rec: TxRecord) => {
        if (rec.signature !== sig) return;
        dispose();
        fire(rec);
      };
      const dispose = () => {
        chain.off(event, listener);
        subs.delete(subId);
      };
      chain.on(event, listener);
      subs.set(subId, dispose);
    };

    const subscribeSlot = (id: unknown) => {
      const subId = nextId++;
      send({ jsonrpc: '2.0', id, result: subId });
      const listener = (slot: number) => notify('slotNotification', subId, { parent: slot - 1, root: slot, slot });
      chain.on('slot', listener);
      subs.set(subId, () => {
        chain.off('slot', listener);
        subs.delete(subId);
      });
    };

    const handle = (req: Reply) => {
      const { id, method } = req;
      const params = Array.isArray(req.params) ? (req.params as unknown[]) : [];
      if (id === undefined || id === null) return; // notifications (web3.js sends `ping`)
      if (method === 'signatureSubscribe') return subscribeSignature(id, params);
      if (method === 'slotSubscribe') return subscribeSlot(id);
      if (typeof method === 'string' && method.endsWith('Unsubscribe')) {
        const dispose = typeof params[0] === 'number' ? subs.get(params[0]) : undefined;
        dispose?.();
        return send({ jsonrpc: '2.0', id, result: dispose !== undefined });
      }
      send({ jsonrpc: '2.0', id, error: { code: -32601, message: 'Method not found' } });
    };

    ws.on('message', (raw) => {
      let msg: unknown;
      try {
        msg = JSON.parse(raw.toString());
      } catch {
        return send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
      }
      for (const req of Array.isArray(msg) ? msg : [msg]) {
        if (req && typeof req === 'object') handle(req as Reply);
      }
    });
    ws.on('close', () => {
      for (const dispose of [...subs.values()]) dispose();
    });
  });
  return wss;
}
