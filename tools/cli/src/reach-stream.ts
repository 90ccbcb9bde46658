/**
 * Billing's reach streams as `gpu` opens them: a WebSocket to a route under `/api/v1/billing/`, the caller's bearer
 * token on the upgrade, a refusal (every check runs before the upgrade) read as the `ApiError` it is. `bridge` carries
 * a byte stream (an SSH transport) over one: each binary message is bytes of it, both ways, with backpressure both
 * ways; the WebSocket's close 1000 is the stream's end, any other close its break. `bridgeRaw` carries a forwarded
 * port's connection on a raw byte stream instead (`Upgrade: tcp`): no frames, the bytes as they are.
 */
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { ApiError } from '@gpu/client';
import { openRawUpgrade, UpgradeRefused } from '@gpu/common/raw-upgrade';
import WebSocket from 'ws';
import type { Context } from './cli.ts';

/** What a caller of the streams needs of the context: where the platform is, and who the caller is. */
type StreamContext = Pick<Context, 'url' | 'token'>;

/** Past this many bytes queued for the WebSocket, the local side is not read until they have gone out. */
const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;
/** A ping this often: bytes on an idle stream, so that no proxy on the way (the gateway's hour, a NAT's minutes) cuts it. */
const PING_MS = 30_000;
/** How long a stream closed by its side is given to answer the close before it is cut. */
const CLOSE_GRACE_MS = 1000;

/**
 * A WebSocket to billing's `path` (with the query), with the caller's token; not yet open. `compress: false` offers
 * no compression (bytes of SSH are encrypted, a forwarded connection's often compressed already).
 */
export async function reachSocket(
  ctx: StreamContext,
  path: string,
  opts: { protocols?: string[]; compress?: boolean } = {},
): Promise<WebSocket> {
  const token = await ctx.token.get();
  return new WebSocket(`${ctx.url.replace(/^http/, 'ws')}${path}`, opts.protocols ?? [], {
    headers: { authorization: `Bearer ${token}` },
    ...(opts.compress === false ? { perMessageDeflate: false } : {}),
  });
}

/** Resolves once `ws` is open; rejects with the platform's refusal as an `ApiError`, or with why it could not connect. */
export function whenOpen(ws: WebSocket): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => {
        body += String(d);
      });
      res.on('end', () => {
        let problem: Record<string, unknown> = { detail: body.slice(0, 300) || `answered ${res.statusCode}` };
        try {
          problem = JSON.parse(body) as Record<string, unknown>;
        } catch {
          // Not a problem body (a proxy's page).
        }
        reject(new ApiError(res.statusCode ?? 502, problem));
      });
    });
    ws.once('error', reject);
  });
}

/** How a bridged stream ended: the WebSocket's close code and reason (1000: the stream's normal end). */
export interface StreamEnd {
  code: number;
  reason: string;
}

export interface BridgeOptions {
  /** Ends the stream from this side (the WebSocket closed with 1001): Ctrl-C, the forwarder stopping. */
  signal?: AbortSignal;
  /**
   * The protocol has no half-close: once the local side has sent all it will (its end), the stream is closed (1000)
   * after the remote side has been silent this long, or at once with 0. Meanwhile what the remote sends (an answer to
   * a request that ended with a half-close) still comes through.
   */
  lingerMs?: number;
}

/**
 * Carries a byte stream between `local` and billing's stream at `path`: what `local.input` gives is sent, what comes
 * is written to `local.output`. Resolves with how the WebSocket closed (the caller ends or breaks its side); rejects
 * when the stream does not open (the refusal as an `ApiError`). The input is read only once the stream is open.
 */
export async function bridge(
  ctx: StreamContext,
  path: string,
  local: { input: Readable; output: Writable },
  opts: BridgeOptions = {},
): Promise<StreamEnd> {
  const { input, output } = local;
  const ws = await reachSocket(ctx, path, { compress: false });
  // An error is followed by the close, which says the rest.
  ws.on('error', () => {});
  // Listening from the first moment: the remote side may speak first (an SSH server's banner) with the upgrade.
  const closed = new Promise<StreamEnd>((resolve) =>
    ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })),
  );
  let outputBlocked = false;
  let quietTimer: NodeJS.Timeout | undefined;
  let inputEnded = false;
  const closeQuietly = () => {
    if (ws.readyState === WebSocket.OPEN) ws.close(1000);
  };
  // Silence counts only while the output takes what comes: a remote side held back by a slow reader is not silent.
  const armLinger = () => {
    clearTimeout(quietTimer);
    if (!outputBlocked) quietTimer = setTimeout(closeQuietly, opts.lingerMs ?? 0);
  };
  ws.on('message', (data: Buffer) => {
    if (!output.write(data) && !outputBlocked) {
      outputBlocked = true;
      ws.pause();
      output.once('drain', () => {
        outputBlocked = false;
        ws.resume();
        if (inputEnded) armLinger();
      });
    }
    if (inputEnded) armLinger();
  });

  let cutTimer: NodeJS.Timeout | undefined;
  /** Why this side went away before the stream opened (it ends as one closed with 1001 then). */
  let leftEarly: string | undefined;
  const goAway = (reason: string) => {
    if (ws.readyState === WebSocket.CONNECTING) {
      leftEarly = reason;
      ws.terminate();
    } else if (ws.readyState === WebSocket.OPEN) {
      ws.close(1001, reason);
      cutTimer = setTimeout(() => ws.terminate(), CLOSE_GRACE_MS);
    }
  };
  const onAbort = () => goAway('stopped');
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  if (opts.signal?.aborted) onAbort();

  let pinger: NodeJS.Timeout | undefined;
  let inputPaused = false;
  const sent = () => {
    if (inputPaused && ws.bufferedAmount < LOW_WATER) {
      inputPaused = false;
      input.resume();
    }
  };
  const onData = (chunk: Buffer) => {
    if (ws.readyState !== WebSocket.OPEN) return;
    ws.send(chunk, { binary: true }, sent);
    if (ws.bufferedAmount > HIGH_WATER && !inputPaused) {
      inputPaused = true;
      input.pause();
    }
  };
  const onEnd = () => {
    inputEnded = true;
    armLinger();
  };
  const onLocalError = (err: NodeJS.ErrnoException) => goAway(`local side: ${err.code ?? err.message}`);
  // Closed without its end first (a reset, a destroy): nothing more comes or goes on this side.
  const onLocalClose = () => {
    if (!inputEnded) goAway('local side closed');
  };
  input.on('error', onLocalError);
  output.on('error', onLocalError);
  input.once('close', onLocalClose);
  try {
    try {
      await whenOpen(ws);
    } catch (err) {
      if (leftEarly !== undefined) return { code: 1001, reason: leftEarly };
      throw err;
    }
    if (input.destroyed || output.destroyed) onLocalClose();
    pinger = setInterval(() => ws.ping(), PING_MS);
    input.on('data', onData);
    input.once('end', onEnd);
    input.resume();
    return await closed;
  } finally {
    clearInterval(pinger);
    clearTimeout(quietTimer);
    clearTimeout(cutTimer);
    opts.signal?.removeEventListener('abort', onAbort);
    input.off('data', onData);
    input.off('end', onEnd);
    input.off('error', onLocalError);
    output.off('error', onLocalError);
    input.off('close', onLocalClose);
    input.pause();
  }
}

/**
 * Carries a local TCP connection over billing's raw byte stream at `path` (`Upgrade: tcp`), both ways with
 * backpressure, resolving as `bridge` does: 1000 once the remote side ended (the workload closed its side), or once
 * the local side ended and the remote side then stayed silent for `lingerMs` (a gateway on the way may close the
 * whole stream at a half-close, so the local end is not passed on while an answer may still come); 1001 when stopped
 * (`signal`); 1006 when the stream was cut (a reset: billing resets a stream it ends, at the session's end, which a
 * gateway on the way passes on as an end). TCP keepalive probes the stream (a NAT must not forget it), but only bytes
 * count against a gateway's idle limit (an hour): a raw stream has no ping of its own. Rejects when it does not open (the refusal as an `ApiError`). The local
 * side is read only once the stream is open.
 */
export async function bridgeRaw(
  ctx: StreamContext,
  path: string,
  local: Socket,
  opts: BridgeOptions = {},
): Promise<StreamEnd> {
  if (opts.signal?.aborted) return { code: 1001, reason: 'stopped' };
  const token = await ctx.token.get();
  let remote: Socket;
  try {
    remote = await openRawUpgrade(`${ctx.url}${path}`, {
      headers: { authorization: `Bearer ${token}` },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  } catch (err) {
    // Stopped while it opened (Ctrl-C): nothing was opened.
    if (opts.signal?.aborted) return { code: 1001, reason: 'stopped' };
    throw err instanceof UpgradeRefused ? new ApiError(err.status, err.problem()) : err;
  }
  remote.on('error', () => {});
  return new Promise<StreamEnd>((resolve) => {
    let quietTimer: NodeJS.Timeout | undefined;
    let localEnded = false;
    let done = false;
    /** Ends the bridge: the remote side ended (its end answered with ours), or it is closed (`cut`). */
    const finish = (end: StreamEnd, cut = end.code !== 1000) => {
      if (done) return;
      done = true;
      clearTimeout(quietTimer);
      opts.signal?.removeEventListener('abort', onAbort);
      local.unpipe(remote);
      remote.unpipe(local);
      if (cut) remote.destroy();
      else remote.end();
      resolve(end);
    };
    let awaitingDrain = false;
    // Silence counts only while the local side takes what comes: a remote side held back by a slow reader is not
    // silent.
    const armLinger = () => {
      clearTimeout(quietTimer);
      if (local.writableNeedDrain) {
        if (!awaitingDrain) {
          awaitingDrain = true;
          local.once('drain', () => {
            awaitingDrain = false;
            armLinger();
          });
        }
        return;
      }
      // Over: nothing more is sent either way, so the stream is closed (its end would leave it half-open).
      quietTimer = setTimeout(() => finish({ code: 1000, reason: '' }, true), opts.lingerMs ?? 0);
    };
    const onAbort = () => finish({ code: 1001, reason: 'stopped' });
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    remote.pipe(local, { end: false });
    local.pipe(remote, { end: false });
    remote.on('data', () => {
      if (localEnded) armLinger();
    });
    remote.once('end', () => finish({ code: 1000, reason: '' }));
    remote.once('close', () => finish({ code: 1006, reason: 'the stream was cut' }));
    local.once('end', () => {
      localEnded = true;
      armLinger();
    });
    const localGone = () => {
      if (!localEnded) finish({ code: 1001, reason: 'local side closed' });
    };
    local.once('close', localGone);
    // Gone while the stream was opening.
    if (local.destroyed) localGone();
  });
}
