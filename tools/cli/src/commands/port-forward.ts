/**
 * `gpu port-forward <session> <remote>[:<local>]...`: local ports whose connections reach ports of a rented
 * workload, as `kubectl port-forward` does. Each connection accepted here opens one of billing's port-forward streams
 * (a raw byte stream, `Upgrade: tcp`: one TCP connection to 127.0.0.1:<remote> inside the workload) and carries its
 * bytes both ways, so whatever runs over TCP (HTTP, a notebook's kernel WebSockets, a database's protocol) passes as
 * it is.
 */
import net from 'node:net';
import { ApiError, unwrap } from '@gpu/client';
import type { Command } from 'commander';
import { type Context, context, printJson, UsageError } from '../cli.ts';
import { bridgeRaw } from '../reach-stream.ts';

/** A local port and the workload's port it reaches (local 0: a free port chosen when listening). */
export interface PortSpec {
  remote: number;
  local: number;
}

/** The refusals after which no connection can succeed: the forwarder stops. */
const FATAL = new Set(['SESSION_NOT_FOUND', 'SESSION_NOT_ACTIVE', 'NO_WORKLOAD']);
/** How long a connection whose local side has finished sending waits on a silent remote side before it is closed. */
const LINGER_MS = 5000;
/** How long the workload's connections are given to close once the forwarder stops. */
const STOP_GRACE_MS = 2000;

/** `<remote>[:<local>]` (`8888`, `8888:9000`, `8888:0`), or a usage error saying what is wrong with it. */
export function parsePortSpec(spec: string): PortSpec {
  const m = /^(\d{1,5})(?::(\d{1,5}))?$/.exec(spec);
  if (!m)
    throw new UsageError(`a port is <remote>[:<local>] (8888, 8888:9000, or 8888:0 for any free one), not "${spec}"`);
  const remote = Number(m[1]);
  const local = m[2] === undefined ? remote : Number(m[2]);
  if (remote < 1 || remote > 65535) throw new UsageError(`"${spec}": the workload's port is from 1 to 65535`);
  if (local > 65535) throw new UsageError(`"${spec}": the local port is from 0 (any free one) to 65535`);
  return { remote, local };
}

/** Every spec parsed; a usage error for one that is wrong, or two that listen on the same local port. */
export function parsePortSpecs(specs: string[]): PortSpec[] {
  const parsed = specs.map(parsePortSpec);
  const seen = new Set<number>();
  for (const { local } of parsed) {
    if (local !== 0 && seen.has(local)) throw new UsageError(`local port ${local} is named twice`);
    seen.add(local);
  }
  return parsed;
}

/**
 * Fails fast, before listening, for a session that cannot be reached: unknown, ended, or with no workload or one that
 * has ended. A caller whose key cannot read sessions (only `connect`) is not checked here: each stream says the same.
 */
async function checkSession(ctx: Context, sessionId: string): Promise<void> {
  let w: Awaited<ReturnType<typeof workloadOf>>;
  try {
    w = await workloadOf(ctx, sessionId);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'INSUFFICIENT_SCOPE') return;
    throw err;
  }
  if (w.session.status === 'completed' || w.session.status === 'terminated') {
    throw new Error(`session ${sessionId} has ended (${w.session.end_reason ?? w.session.status})`);
  }
  if (w.state === 'exited' || w.state === 'failed' || w.state === 'stopped') {
    throw new Error(`the workload of session ${sessionId} has ended (${w.state})`);
  }
  if (w.state !== 'running') {
    process.stderr.write(`gpu: the workload is ${w.state}: connections are refused until it runs\n`);
  }
}

function workloadOf(ctx: Context, sessionId: string) {
  return ctx.billing
    .GET('/api/v1/billing/sessions/{sessionID}/workload', { params: { path: { sessionID: sessionId } } })
    .then(unwrap);
}

/** `host:port`, an IPv6 address in brackets. */
function hostPort(address: string, port: number): string {
  return `${net.isIPv6(address) ? `[${address}]` : address}:${port}`;
}

/** Listens on `address:port`; the server once listening, or why it cannot. */
function listen(server: net.Server, address: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException) =>
      reject(new Error(`cannot listen on ${hostPort(address, port)}: ${err.code ?? err.message}`));
    server.once('error', failed);
    server.listen({ host: address, port }, () => {
      server.off('error', failed);
      resolve((server.address() as net.AddressInfo).port);
    });
  });
}

/**
 * Forwards until `stop` (Ctrl-C, SIGTERM) or a refusal after which nothing can succeed; then closes the listeners
 * and every connection. Rejects with that refusal.
 */
async function forward(ctx: Context, sessionId: string, address: string, specs: PortSpec[]): Promise<void> {
  const stopping = new AbortController();
  let fatal: unknown;
  const stop = (err?: unknown) => {
    fatal ??= err;
    stopping.abort();
  };
  const open = new Set<net.Socket>();
  const streams = new Set<Promise<unknown>>();

  const connection = (remote: number) => (socket: net.Socket) => {
    socket.setNoDelay(true);
    // Until the stream is open, an error here (a reset) is the bridge's to see as the socket's close.
    socket.on('error', () => undefined);
    open.add(socket);
    const path = `/api/v1/billing/sessions/${encodeURIComponent(sessionId)}/port-forward?port=${remote}`;
    const done = bridgeRaw(ctx, path, socket, { signal: stopping.signal, lingerMs: LINGER_MS })
      .then(({ code, reason }) => {
        if (code === 1000) {
          socket.end();
          return;
        }
        // Broken on the other side: said, and passed on as a reset (on this side, or stopped: nothing to say).
        const there = !socket.destroyed && !stopping.signal.aborted;
        socket.resetAndDestroy();
        if (there) {
          process.stderr.write(`gpu: port ${remote}: the connection broke (${code}${reason ? `: ${reason}` : ''})\n`);
        }
      })
      .catch((err: unknown) => {
        socket.destroy();
        if (stopping.signal.aborted) return;
        // The session gone: the error ends the command, and says so.
        if (err instanceof ApiError && FATAL.has(err.code ?? '')) return stop(err);
        if (err instanceof ApiError) {
          const p = err.problem as { code?: string; detail?: string; title?: string };
          process.stderr.write(`gpu: port ${remote}: ${p.code ?? err.status}: ${p.detail ?? p.title ?? 'refused'}\n`);
          if (err.status === 401) ctx.token.invalidate?.();
        } else {
          const cause = (err as { code?: string }).code ?? (err as Error).message;
          process.stderr.write(`gpu: port ${remote}: cannot reach ${ctx.url}: ${cause}\n`);
        }
      })
      .finally(() => {
        open.delete(socket);
        streams.delete(done);
      });
    streams.add(done);
  };

  const servers: net.Server[] = [];
  const listening: { address: string; local_port: number; remote_port: number }[] = [];
  try {
    for (const spec of specs) {
      const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, connection(spec.remote));
      servers.push(server);
      const port = await listen(server, address, spec.local);
      server.on('error', (err: NodeJS.ErrnoException) =>
        process.stderr.write(`gpu: port ${spec.remote}: ${err.code ?? err.message}\n`),
      );
      listening.push({ address, local_port: port, remote_port: spec.remote });
    }
  } catch (err) {
    for (const s of servers) s.close();
    throw err;
  }
  if (ctx.json) printJson(listening);
  else {
    for (const l of listening)
      process.stdout.write(`Forwarding from ${hostPort(address, l.local_port)} -> ${l.remote_port}\n`);
  }

  const onSignal = () => stop();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await new Promise((resolve) => stopping.signal.addEventListener('abort', resolve, { once: true }));
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    for (const s of servers) s.close();
    // Each stream closes itself on the abort; a local connection still waiting is cut.
    const grace = new Promise((resolve) => setTimeout(resolve, STOP_GRACE_MS).unref());
    await Promise.race([Promise.allSettled([...streams]), grace]);
    for (const socket of open) socket.destroy();
  }
  if (fatal) throw fatal;
}

export function portForwardCommands(program: Command) {
  program
    .command('port-forward <session-id>')
    .argument(
      '<ports...>',
      "<remote>[:<local>]: the workload's port, and the local one (default the same; 0: any free)",
    )
    .description(
      "reach ports of a rented session's running workload from this machine: listens on each local port and carries " +
        'each connection to 127.0.0.1:<remote> inside the workload, until Ctrl-C (a notebook: gpu port-forward <id> 8888)',
    )
    .option('--address <address>', 'the local address to listen on', '127.0.0.1')
    .action(async (sessionId: string, ports: string[], opts: { address: string }) => {
      const specs = parsePortSpecs(ports);
      if (net.isIP(opts.address) === 0 && opts.address !== 'localhost') {
        throw new UsageError(`--address takes an IP address (127.0.0.1, ::1, 0.0.0.0), not "${opts.address}"`);
      }
      const ctx = context(program);
      await checkSession(ctx, sessionId);
      await forward(ctx, sessionId, opts.address, specs);
    });
}

export function openCommands(program: Command) {
  program
    .command('open <session-id> <port>')
    .description(
      "a link that opens a port of a rented session's running workload in a browser (a notebook, TensorBoard), at " +
        "the port's own address; it opens once, within a minute, and signs that browser in there while the session runs",
    )
    .action(async (sessionId: string, port: string) => {
      const { remote } = parsePortSpec(port);
      if (String(remote) !== port)
        throw new UsageError(`gpu open takes the workload's port alone (8888), not "${port}"`);
      const ctx = context(program);
      const link = unwrap(
        await ctx.billing.POST('/api/v1/billing/sessions/{sessionID}/port-links', {
          params: { path: { sessionID: sessionId } },
          body: { port: remote },
        }),
      );
      if (ctx.json) return printJson(link);
      process.stdout.write(`${link.url}\n`);
      process.stderr.write(
        `open it in a browser within a minute (once); the port stays at ${link.origin} for that browser\n`,
      );
    });
}
