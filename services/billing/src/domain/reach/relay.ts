/**
 * The relay between renters and the workloads they rent (docs/architecture.md, "Reach"). Provider machines are
 * behind NAT: each machine's daemon dials out, a WebSocket to `GET /api/v1/billing/reach/daemon`, and serves SSH over
 * it; this instance is the SSH client (`ssh2`). A renter's stream becomes one SSH channel on the connection of the
 * session's machine: an exec request naming the session and the program, run by the daemon in that session's
 * workload only.
 *
 * Several instances: a connection is held by one instance, recorded in `reach_links` (its address among them,
 * `reach.advertise_url`). A renter's stream that reaches another instance is passed to the holder, one hop (the
 * holder's own checks run again there; it never passes a stream on). Each instance watches its streams' sessions
 * (every `reach.check_interval`): a stream ends once its session or workload has.
 */
import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { durationMs, type Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
// ssh2 is CommonJS: its classes through the default export (a named import fails outside a bundler).
import ssh2, { type ClientChannel } from 'ssh2';
import type { WebSocket } from 'ws';
import { createWebSocketStream } from 'ws';
import type { BillingConfig } from '../../config.ts';
import {
  claimReachLink,
  findReachLink,
  type ReachLinkRow,
  releaseReachLink,
  touchReachLinks,
} from '../../db/reach-link-repository.ts';
import type { BillingDB } from '../../db/schema.ts';

/** A machine's connection, held here. */
export interface Link {
  id: string;
  providerId: string;
  ssh: ssh2.Client;
  /** Rejects once the connection is gone. */
  readonly closed: Promise<void>;
}

/** A renter's open stream, as the relay ends it. */
export interface OpenStream {
  sessionId: string;
  /** Ends it, saying why. */
  end(reason: string): void;
}

/** How long a holder's record counts without being refreshed (an instance that died leaves its rows). */
const STALE_MS = 30_000;
const TOUCH_MS = 10_000;

export class ReachRelay {
  private readonly links = new Map<string, Link>();
  private readonly streams = new Map<string, Set<OpenStream>>();
  private timers: NodeJS.Timeout[] = [];
  /** Where the other instances reach this one (`reach.advertise_url`, else this instance's address and port). */
  private url: string;
  /** This instance among the others (`instance_id`; one of its own when none is set). */
  private readonly instanceId: string;

  constructor(
    private readonly deps: {
      db: Kysely<BillingDB>;
      config: BillingConfig;
      logger: Logger;
      instanceId: string;
      /** Which of the sessions are still running with a running workload (the rest end their streams). */
      live: (sessionIds: string[]) => Promise<Set<string>>;
    },
  ) {
    this.instanceId = deps.instanceId || randomUUID();
    const { server, reach } = deps.config;
    const host = ['0.0.0.0', '::', ''].includes(server.host) ? '127.0.0.1' : server.host;
    this.url = reach.advertise_url || `http://${host.includes(':') ? `[${host}]` : host}:${server.port}`;
  }

  /** The port the service listens on, once it does (where it was told another, or none). */
  listening(port: number): void {
    if (!this.deps.config.reach.advertise_url) {
      this.url = this.url.replace(/:\d+$/, `:${port}`);
    }
  }

  start(): void {
    const touch = setInterval(() => {
      void touchReachLinks(
        this.deps.db,
        [...this.links.values()].map((l) => l.id),
        new Date(),
      ).catch((err) => this.deps.logger.warn({ err }, 'reach: refreshing the connections failed'));
    }, TOUCH_MS);
    const watch = setInterval(() => void this.endStale(), durationMs(this.deps.config.reach.check_interval));
    touch.unref();
    watch.unref();
    this.timers = [touch, watch];
  }

  /** Ends every stream and connection held here. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const set of this.streams.values()) for (const s of set) s.end('the platform is restarting');
    for (const link of this.links.values()) {
      link.ssh.end();
      await releaseReachLink(this.deps.db, link.id).catch(() => {});
    }
  }

  /**
   * Takes a machine's new connection (its daemon's WebSocket, already let in): SSH over it, recorded as held here.
   * A connection the machine held before (here or elsewhere) is replaced. Resolves when it closes.
   */
  async attach(providerId: string, socket: WebSocket): Promise<void> {
    const id = randomUUID();
    const stream = createWebSocketStream(socket) as Duplex;
    stream.on('error', () => {});
    const ssh = new ssh2.Client();
    let markClosed: () => void = () => {};
    const closed = new Promise<void>((resolve) => {
      markClosed = resolve;
    });
    const link: Link = { id, providerId, ssh, closed };
    ssh.on('error', (err) => this.deps.logger.warn({ err, provider_id: providerId }, 'reach: SSH to a daemon failed'));
    ssh.on('close', () => {
      markClosed();
      socket.terminate();
    });
    // A connection that is gone ends its SSH at once (its channels, the renters' streams, with it): the stream is
    // destroyed, not ended, for SSH would wait on its writing side.
    socket.on('close', () => {
      stream.destroy();
      ssh.destroy();
    });
    const ready = new Promise<void>((resolve, reject) => {
      ssh.once('ready', resolve);
      ssh.once('error', reject);
      ssh.once('close', () => reject(new Error('closed before it was ready')));
    });
    ssh.connect({
      sock: stream as never,
      username: 'relay',
      // The daemon's host key is made anew at each start: the WebSocket (its token, TLS) is what was checked.
      hostVerifier: () => true,
      readyTimeout: 20_000,
      keepaliveInterval: 20_000,
    });
    try {
      await ready;
    } catch (err) {
      socket.terminate();
      throw err;
    }
    const before = this.links.get(providerId);
    this.links.set(providerId, link);
    before?.ssh.end();
    await claimReachLink(
      this.deps.db,
      { providerId, instanceId: this.instanceId, url: this.url, linkId: id },
      new Date(),
    );
    this.deps.logger.info({ provider_id: providerId, link_id: id }, 'reach: a machine connected');
    await closed;
    if (this.links.get(providerId) === link) {
      this.links.delete(providerId);
      await releaseReachLink(this.deps.db, id).catch(() => {});
    }
    this.deps.logger.info({ provider_id: providerId, link_id: id }, 'reach: a machine disconnected');
  }

  /** The machine's connection when held here. */
  local(providerId: string): Link | undefined {
    return this.links.get(providerId);
  }

  /** Where another instance holds the machine's connection (none held anywhere: null). */
  async elsewhere(providerId: string): Promise<ReachLinkRow | null> {
    const row = await findReachLink(this.deps.db, providerId, new Date(Date.now() - STALE_MS));
    return row && row.instanceId !== this.instanceId ? row : null;
  }

  /** How many streams the session has open here. */
  openCount(sessionId: string): number {
    return this.streams.get(sessionId)?.size ?? 0;
  }

  /** Counts the stream among its session's until the returned function is called. */
  track(stream: OpenStream): () => void {
    let set = this.streams.get(stream.sessionId);
    if (!set) {
      set = new Set();
      this.streams.set(stream.sessionId, set);
    }
    set.add(stream);
    return () => {
      set.delete(stream);
      if (set.size === 0 && this.streams.get(stream.sessionId) === set) this.streams.delete(stream.sessionId);
    };
  }

  /** Runs the program in the session's workload over the machine's connection: its SSH channel. */
  exec(
    link: Link,
    request: { sessionId: string; argv: string[]; tty: { cols: number; rows: number } | null },
  ): Promise<ClientChannel> {
    const command = JSON.stringify({ session_id: request.sessionId, argv: request.argv });
    return new Promise((resolve, reject) => {
      link.ssh.exec(
        command,
        request.tty ? { pty: { cols: request.tty.cols, rows: request.tty.rows, term: 'xterm-256color' } } : {},
        (err, channel) => (err ? reject(err) : resolve(channel)),
      );
    });
  }

  /** Ends the streams whose session or workload is no longer running. */
  private async endStale(): Promise<void> {
    const ids = [...this.streams.keys()];
    if (ids.length === 0) return;
    let live: Set<string>;
    try {
      live = await this.deps.live(ids);
    } catch (err) {
      this.deps.logger.warn({ err }, "reach: checking the streams' sessions failed");
      return;
    }
    for (const id of ids) {
      if (live.has(id)) continue;
      for (const s of this.streams.get(id) ?? []) s.end('the session ended');
    }
  }
}
