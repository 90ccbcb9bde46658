/**
 * The daemon's way in for renters (`gpu exec`, `gpu shell`): the machine opens no port (it is behind NAT). The daemon
 * dials out instead, a WebSocket to billing's relay (`GET /api/v1/billing/reach/daemon`, through the platform's
 * gateway, with the daemon's own token), and serves SSH over it (`ssh2`'s server, on the WebSocket as its stream):
 * the relay is the SSH client, and each renter's stream is one SSH channel, with SSH's own flow control, exit
 * statuses, terminals, window changes and signals. The channel's exec request names the session and the program
 * (`{"session_id", "argv"}`, JSON); the daemon runs it only in a workload running on this machine (entry.ts), as that
 * workload's user, never on the machine itself. A `direct-tcpip` channel is a forwarded port: its destination host
 * is the session's ID and its port one on that workload's own loopback (ports.ts), refused unless something listens
 * there.
 *
 * The WebSocket is the transport's authentication (TLS to the platform, the daemon's token checked by the relay,
 * which holds the connection of the machine that token may act for); SSH inside it takes no password or key of its
 * own (`none`), and its host key is made anew at each start. A lost connection ends every channel on it (their
 * programs get SIGHUP, then SIGKILL) and is dialled again, backing off to `max_backoff`.
 */
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import path from 'node:path';
import type { TokenSource } from '@gpu/client';
import { coalesceWrites, durationMs, keepPinging, type Logger } from '@gpu/common';
import { openRawUpgrade, UpgradeRefused } from '@gpu/common/raw-upgrade';
import ssh2, {
  type AcceptConnection,
  type Connection,
  type RejectConnection,
  type ServerChannel,
  type TcpipRequestInfo,
} from 'ssh2';
import WebSocket, { createWebSocketStream } from 'ws';
import { z } from 'zod';
import type { DaemonConfig } from '../config.ts';
import { type Entry, EntryNotReady, entryCommand } from '../workloads/entry.ts';
import { drained, type ExecProcess, startExec } from './exec.ts';
import { DIAL_SUBSYSTEM, type ForwardError, splice, WorkloadPorts } from './ports.ts';

export interface ReachDeps {
  config: DaemonConfig;
  logger: Logger;
  token: TokenSource;
  /** The machine's provider ID once the daemon attached. */
  providerId: () => string | undefined;
  /** How to enter the session's workload; null when none runs here. */
  entryOf: (sessionId: string) => Entry | null;
}

/** What the relay asks to run (the SSH exec request's command, JSON). */
const execRequest = z.object({
  session_id: z.string().uuid(),
  argv: z
    .array(z.string().max(64 * 1024))
    .min(1)
    .max(1024),
  env: z.record(z.string().regex(/^[A-Z_][A-Z0-9_]*$/), z.string().max(256)).default({}),
});

/** What the relay's `gpu-dial` asks (one JSON line). */
const dialRequest = z.object({
  session_id: z.string().uuid(),
  port: z.number().int().min(1).max(65_535),
  ticket: z.string().regex(/^[A-Za-z0-9_-]{32}$/),
});

/** How often the WebSocket is pinged (a gateway or NAT must not see it idle), and how long a pong may take. */
const PING_MS = 20_000;
/** How long a program waits for a workload just reported running to be enterable (its sandbox set up). */
const ENTRY_WAIT_MS = 15_000;

export class ReachLink {
  private stopped = false;
  private socket: WebSocket | undefined;
  private readonly ssh: ssh2.Server;
  private readonly open = new Set<ExecProcess>();
  /** Forwarded connections dialled back over the current relay connection: they end with it. */
  private readonly dialled = new Set<Socket>();
  private readonly ports: WorkloadPorts;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  constructor(private readonly deps: ReachDeps) {
    // Made with Node's crypto (ssh2's own ed25519 generator drops a leading zero byte now and then).
    const hostKey = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
      .privateKey.export({ type: 'sec1', format: 'pem' })
      .toString();
    this.ssh = new ssh2.Server({ hostKeys: [hostKey] }, (client) => this.serve(client));
    this.ssh.on('error', (err: Error) => this.deps.logger.warn({ err }, 'reach: SSH error'));
    this.ports = new WorkloadPorts(deps.entryOf);
  }

  /** Dials the relay, and again whenever the connection is lost, until `stop()`. */
  start(): void {
    this.loop ??= this.run();
  }

  /** Closes the connection (every channel on it ends) and dials no more. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    this.socket?.terminate();
    for (const back of this.dialled) back.destroy();
    for (const p of this.open) p.signal('KILL');
    this.ports.stop();
    await this.loop;
  }

  private async run(): Promise<void> {
    const maxBackoff = durationMs(this.deps.config.max_backoff);
    let failures = 0;
    while (!this.stopped) {
      const id = this.deps.providerId();
      if (!id) {
        await this.pause(1000);
        continue;
      }
      const connectedAt = Date.now();
      try {
        await this.connect(id);
      } catch (err) {
        this.deps.logger.warn({ err: (err as Error).message }, 'reach: the relay connection failed');
      }
      // A connection that held a while was not a failure: dial again at once.
      failures = Date.now() - connectedAt > 30_000 ? 0 : failures + 1;
      if (!this.stopped)
        await this.pause(Math.min(maxBackoff, failures === 0 ? 200 : 1000 * 2 ** Math.min(failures - 1, 8)));
    }
  }

  /** One connection to the relay, until it closes. */
  private async connect(providerId: string): Promise<void> {
    const base = this.deps.config.billing_url.replace(/^http/, 'ws').replace(/\/$/, '');
    const url = `${base}/api/v1/billing/reach/daemon?provider_id=${encodeURIComponent(providerId)}`;
    const token = await this.deps.token.get();
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` }, maxPayload: 4 * 1024 * 1024 });
    this.socket = ws;
    // The stream takes what arrives from the first moment: the relay's first bytes may come with the upgrade's answer,
    // before anything awaiting 'open' runs.
    const stream = createWebSocketStream(ws);
    stream.on('error', () => {});
    // A lost connection ends the SSH connection on it, and so every channel (their programs are hung up).
    ws.on('close', () => stream.destroy());
    const refused = new Promise<never>((_, reject) => {
      ws.once('unexpected-response', (_req, res) => {
        if (res.statusCode === 401) this.deps.token.invalidate?.();
        let body = '';
        res.on('data', (d: Buffer) => {
          body = `${body}${String(d)}`.slice(0, 500);
        });
        res.on('end', () => reject(new Error(`the relay answered ${res.statusCode}: ${body}`)));
      });
      ws.once('error', reject);
    });
    await Promise.race([once(ws, 'open'), refused]);
    this.deps.logger.info({ provider_id: providerId }, 'reach: connected to the relay');
    keepPinging(ws, PING_MS);
    // One WebSocket frame per turn, not one per piece of each SSH packet.
    this.ssh.injectSocket(coalesceWrites(stream) as never);
    try {
      await once(ws, 'close');
    } finally {
      for (const dialled of this.dialled) dialled.destroy();
      this.deps.logger.info({ provider_id: providerId }, 'reach: the relay connection closed');
    }
  }

  /**
   * The relay's SSH connection: channels of `exec` requests, each a program in a workload, and `direct-tcpip`
   * channels, each a connection to a port of a workload (ports.ts).
   */
  private serve(client: Connection): void {
    let closed = false;
    client.on('error', () => {});
    client.once('close', () => {
      closed = true;
    });
    client.on('authentication', (ctx) => ctx.accept());
    client.on('tcpip', (accept, reject, info) => this.forward(accept, reject, info, () => closed));
    client.on('session', (acceptSession) => {
      const session = acceptSession();
      let tty: { cols: number; rows: number; term: string } | null = null;
      let running: ExecProcess | undefined;
      session.on('pty', (accept, _reject, info) => {
        tty = { cols: info.cols || 80, rows: info.rows || 24, term: info.term || 'xterm-256color' };
        accept?.();
      });
      session.on('window-change', (accept, _reject, info) => {
        running?.resize(info.cols, info.rows);
        accept?.();
      });
      session.on('signal', (accept, _reject, info) => {
        running?.signal(info.name);
        accept?.();
      });
      session.on('subsystem', (accept, reject, info) => {
        if (info.name !== DIAL_SUBSYSTEM) return reject();
        this.dialBack(accept());
      });
      session.on('exec', (accept, reject, info) => {
        let request: z.infer<typeof execRequest>;
        try {
          request = execRequest.parse(JSON.parse(info.command));
        } catch {
          reject();
          return;
        }
        const entry = this.deps.entryOf(request.session_id);
        const channel = accept();
        if (!entry) {
          channel.stderr.write('gpu: no workload of this session runs on the machine\n');
          channel.exit(125);
          channel.end();
          return;
        }
        // A workload just reported running may not be enterable for a moment (its sandbox still being set up): the
        // program starts once it is, within ENTRY_WAIT_MS, rather than failing the renter's first exec.
        const deadline = Date.now() + ENTRY_WAIT_MS;
        let gone = false;
        channel.once('close', () => {
          gone = true;
        });
        const start = () => {
          if (gone) return;
          try {
            running = this.run1(channel, entry, request, tty);
          } catch (err) {
            if (err instanceof EntryNotReady && Date.now() < deadline) {
              setTimeout(start, 100);
              return;
            }
            channel.stderr.write(`gpu: ${(err as Error).message}\n`);
            channel.exit(125);
            channel.end();
          }
        };
        start();
      });
    });
  }

  /**
   * A forwarded port: the destination's host is the session's ID, its port the workload's. The channel is accepted
   * only once the connection inside is made, and refused otherwise (ssh2 answers CONNECT_FAILED), so the relay can
   * tell the renter.
   */
  private forward(
    accept: AcceptConnection<ServerChannel>,
    reject: RejectConnection,
    info: TcpipRequestInfo,
    closed: () => boolean,
  ): void {
    this.ports.connect(info.destIP, info.destPort).then(
      (socket) => {
        // The relay's connection went meanwhile: its channels are gone, and no channel would close this one.
        if (closed()) socket.destroy();
        else splice(accept(), socket);
      },
      (err: ForwardError) => {
        this.deps.logger.debug(
          { session_id: info.destIP, port: info.destPort, reason: err.reason, err: err.message },
          'reach: a forwarded port refused',
        );
        reject();
      },
    );
  }

  /**
   * A forwarded port's connection, dialled back (`gpu-dial`): the relay writes `{"session_id", "port", "ticket"}` (one
   * JSON line) and closes its side; the daemon connects inside the workload (ports.ts), then opens a connection of its
   * own to the relay's `GET /api/v1/billing/reach/dial` with the ticket and its token (upgraded to a raw byte stream),
   * and answers `{"ok": true}` once it is open, or `{"error": <reason>, "message"}` (`refused`: nothing listens
   * there). The connection's bytes go on it as they are, not through SSH.
   */
  private dialBack(channel: ServerChannel): void {
    let line = '';
    const answer = (body: object) => {
      try {
        channel.end(`${JSON.stringify(body)}\n`);
      } catch {
        // The relay's connection went.
      }
    };
    channel.on('error', () => {});
    channel.on('data', (d: Buffer) => {
      line = `${line}${String(d)}`.slice(0, 4096);
    });
    channel.once('end', () => {
      let request: z.infer<typeof dialRequest>;
      try {
        request = dialRequest.parse(JSON.parse(line));
      } catch {
        answer({ error: 'invalid', message: 'a dial names a session, a port and a ticket' });
        return;
      }
      void this.dial(request).then(
        () => answer({ ok: true }),
        (err: Error & { reason?: string }) => answer({ error: err.reason ?? 'unavailable', message: err.message }),
      );
    });
  }

  /**
   * Connects to the port in the workload, then dials the relay back with the connection: a raw byte stream (an HTTP
   * upgrade to `tcp`, @gpu/common/raw-upgrade), so that neither side frames, masks or parses what it carries.
   */
  private async dial(request: z.infer<typeof dialRequest>): Promise<void> {
    const providerId = this.deps.providerId();
    if (!providerId) throw new Error('the daemon is not attached yet');
    const socket = await this.ports.connect(request.session_id, request.port);
    const query = new URLSearchParams({ provider_id: providerId, ticket: request.ticket });
    let back: Socket | undefined;
    try {
      const token = await this.deps.token.get();
      back = await openRawUpgrade(
        `${this.deps.config.billing_url.replace(/\/$/, '')}/api/v1/billing/reach/dial?${query}`,
        { headers: { authorization: `Bearer ${token}` }, timeoutMs: 10_000 },
      ).catch((err: unknown) => {
        throw err instanceof UpgradeRefused ? new Error(`the relay answered the dial-back ${err.status}`) : err;
      });
      // The relay's connection went meanwhile: every stream of it is gone, this one too.
      if (this.stopped || this.socket?.readyState !== WebSocket.OPEN) throw new Error('the relay connection closed');
      const opened = back;
      this.dialled.add(opened);
      opened.once('close', () => this.dialled.delete(opened));
      splice(opened, socket);
    } catch (err) {
      back?.destroy();
      socket.destroy();
      throw err;
    }
  }

  /** Runs one program in the workload on the channel: its streams, then its exit status. */
  private run1(
    channel: ServerChannel,
    entry: Entry,
    request: z.infer<typeof execRequest>,
    tty: { cols: number; rows: number; term: string } | null,
  ): ExecProcess {
    const dir = path.join(path.resolve(this.deps.config.workloads.run_dir), '.reach');
    const env = { ...request.env, ...(tty ? { TERM: tty.term } : {}) };
    const command = entryCommand(entry, { argv: request.argv, env, tty: tty !== null }, dir);
    const proc = startExec(command, tty);
    this.open.add(proc);
    channel.pipe(proc.stdin);
    proc.stdout.pipe(channel, { end: false });
    proc.stderr?.pipe(channel.stderr, { end: false });
    // The renter went away (the relay closed the channel, or the connection is lost): the program goes too.
    const hangUp = () => {
      proc.signal('HUP');
      setTimeout(() => proc.signal('KILL'), 1000).unref();
    };
    channel.once('close', hangUp);
    void proc.ended.then(async (end) => {
      this.open.delete(proc);
      channel.off('close', hangUp);
      await Promise.all([drained(proc.stdout), proc.stderr ? drained(proc.stderr) : Promise.resolve()]);
      try {
        if (end.signal) channel.exit(end.signal.replace(/^SIG/, ''), false, '');
        else channel.exit(end.code ?? 0);
        channel.end();
      } catch {
        // The channel is gone already.
      }
    });
    return proc;
  }

  private pause(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
