/**
 * The relay between renters and the workloads they rent (docs/architecture.md, "Reach"). Provider machines are
 * behind NAT: each machine's daemon dials out, a WebSocket to `GET /api/v1/billing/reach/daemon`, and serves SSH over
 * it; this instance is the SSH client (`ssh2`). A renter's stream becomes one SSH channel on the connection of the
 * session's machine: an exec request naming the session and the program, run by the daemon in that session's
 * workload only.
 *
 * A forwarded port's bytes take no SSH: the relay asks the daemon over the connection (an SSH subsystem channel,
 * `gpu-dial`) to connect to the port and dial back, a connection of its own to `GET /api/v1/billing/reach/dial` with
 * a one-time ticket, upgraded to a raw byte stream (`Upgrade: tcp`, @gpu/common/raw-upgrade), which the relay joins to
 * the renter's stream (`dial`). SSH's encryption inside the WebSocket's TLS cost each side some 14 CPU seconds a GB,
 * WebSocket frames parsed and built again at each hop some 4; raw bytes cost what moving them costs. A daemon without
 * the subsystem is forwarded over SSH as before (`forward`).
 *
 * Several instances: a connection is held by one instance, recorded in `reach_links` (its address among them,
 * `reach.advertise_url`). A renter's stream, or a daemon's dial-back, that reaches another instance is passed to the
 * holder, one hop (the holder's own checks run again there; it never passes a stream on). Each instance watches its
 * streams' sessions (every `reach.check_interval`): a stream ends once its session or workload has.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { AppError, coalesceWrites, durationMs, type Logger, type Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
// ssh2 is CommonJS: its classes through the default export (a named import fails outside a bundler).
import ssh2, { type ClientChannel } from 'ssh2';
import type { WebSocket } from 'ws';
import { createWebSocketStream } from 'ws';
import type { BillingConfig } from '../../config.ts';
import {
  addReachBytes,
  claimReachLink,
  findReachLink,
  type ReachLinkRow,
  releaseReachLink,
  touchReachLinks,
} from '../../db/reach-link-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { ByteMeter } from './meter.ts';

/** A machine's connection, held here. */
export interface Link {
  id: string;
  providerId: string;
  ssh: ssh2.Client;
  /** Resolves once the connection is gone. */
  readonly closed: Promise<void>;
  /** Its dial-backs open now (they end with it). */
  readonly dialled: Set<Duplex>;
}

/** A renter's open stream, as the relay ends it. */
export interface OpenStream {
  sessionId: string;
  /** Ends it, saying why. */
  end(reason: string): void;
  /**
   * The bytes it carried so far, in from the renter and out to them (its connection's own counts, where it meets the
   * machine's connection; none at an instance that passes it on).
   */
  bytes?: () => { in: number; out: number };
  /** The credential that opened it (a user's sign-in or API key), while which it stays open. */
  credential?: StreamCredential;
}

/** Who opened a stream, as the auth service knows the credential. */
export interface StreamCredential {
  userId: string;
  keyId?: string;
  signInId?: string;
}

/** The credential a renter's stream lives by: their sign-in, or their API key. */
export const credentialOf = (actor: Principal): StreamCredential => ({
  userId: actor.subject,
  ...(actor.keyId ? { keyId: actor.keyId } : {}),
  ...(actor.sessionId ? { signInId: actor.sessionId } : {}),
});

/** How long a holder's record counts without being refreshed (an instance that died leaves its rows). */
const STALE_MS = 30_000;
const TOUCH_MS = 10_000;
/** How often the bytes streams carried are recorded with their workloads. */
const RECORD_MS = 2_000;
/** SSH's reason for a channel that could not be opened because the connection failed (RFC 4254 §5.1). */
const CONNECT_FAILED = 2;

/** The daemon's subsystem that connects to a workload's port and dials back (tools/provider-daemon/src/reach/link.ts). */
const DIAL_SUBSYSTEM = 'gpu-dial';
/** How long a dial-back may take to arrive once asked for. */
const DIAL_TIMEOUT_MS = 10_000;

/** The daemon has no `gpu-dial` subsystem (a daemon from before it): the port is forwarded over SSH instead. */
export class DialUnsupported extends Error {}

/** A dial-back asked of a daemon, until its connection arrives. */
interface PendingDial {
  providerId: string;
  arrived(socket: Duplex): void;
}

/** 502 PORT_NOT_LISTENING. */
const portNotListening = (request: { sessionId: string; port: number }) =>
  new AppError(
    'dependency_failed',
    'PORT_NOT_LISTENING',
    `nothing listens on port ${request.port} in the workload of session ${request.sessionId} (a server must listen ` +
      'on its loopback, 127.0.0.1, or on every address)',
    { extra: { port: request.port }, callersOwn: true },
  );

export class ReachRelay {
  private readonly links = new Map<string, Link>();
  /** Dial-backs asked for and not arrived yet, by ticket. */
  private readonly dials = new Map<string, PendingDial>();
  private readonly streams = new Map<string, Set<OpenStream>>();
  /** Each session's bytes a second, while it has streams. */
  private readonly meters = new Map<string, ByteMeter>();
  /** Each counted stream's bytes as last recorded. */
  private readonly recorded = new WeakMap<OpenStream, { in: number; out: number }>();
  /** Bytes not recorded yet, by session (those of streams that ended, and of proxied HTTP requests). */
  private pending = new Map<string, { in: number; out: number }>();
  private timers: NodeJS.Timeout[] = [];
  private readonly checking = { sessions: false, credentials: false };
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
      /** Whether each credential still holds (false: its streams end); absent: never asked. */
      credentialsLive?: ((credentials: StreamCredential[]) => Promise<boolean[]>) | null;
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
    const watch = setInterval(() => this.endStale(), durationMs(this.deps.config.reach.check_interval));
    const record = setInterval(() => void this.recordBytes(), RECORD_MS);
    for (const t of [touch, watch, record]) t.unref();
    this.timers = [touch, watch, record];
  }

  /** Ends every stream and connection held here. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const set of this.streams.values()) for (const s of set) s.end('the platform is restarting');
    await this.recordBytes();
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
    const link: Link = { id, providerId, ssh, closed, dialled: new Set() };
    // A stream ends with the machine's connection, as its SSH channels do.
    void closed.then(() => {
      for (const dialled of link.dialled) dialled.destroy();
    });
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
      // One WebSocket frame per turn, not one per piece of each SSH packet.
      sock: coalesceWrites(stream) as never,
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
    try {
      await claimReachLink(
        this.deps.db,
        { providerId, instanceId: this.instanceId, url: this.url, linkId: id },
        new Date(),
      );
    } catch (err) {
      // Not recorded as held here, so not held at all: the daemon connects again (its link's own retry).
      if (this.links.get(providerId) === link) this.links.delete(providerId);
      ssh.end();
      socket.terminate();
      throw err;
    }
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

  /** The session's byte meter (`reach.max_mib_per_second`), shared by its streams here. */
  meter(sessionId: string): ByteMeter {
    let meter = this.meters.get(sessionId);
    if (!meter) {
      meter = new ByteMeter(this.deps.config.reach.max_mib_per_second * 1024 * 1024);
      this.meters.set(sessionId, meter);
    }
    return meter;
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
      this.count(stream.sessionId, this.unrecorded(stream));
      set.delete(stream);
      if (set.size === 0 && this.streams.get(stream.sessionId) === set) {
        this.streams.delete(stream.sessionId);
        this.meters.delete(stream.sessionId);
      }
    };
  }

  /** Runs the program in the session's workload over the machine's connection: its SSH channel. */
  exec(
    link: Link,
    request: {
      sessionId: string;
      argv: string[];
      tty: { cols: number; rows: number } | null;
      /** The terminal's type (xterm-256color unless named). */
      term?: string;
      /** Variables beside the workload's own (LANG of a renter's SSH client). */
      env?: Record<string, string>;
    },
  ): Promise<ClientChannel> {
    const command = JSON.stringify({ session_id: request.sessionId, argv: request.argv, env: request.env ?? {} });
    const term = request.term && /^[A-Za-z0-9._+-]{1,64}$/.test(request.term) ? request.term : 'xterm-256color';
    return new Promise((resolve, reject) => {
      link.ssh.exec(
        command,
        request.tty ? { pty: { cols: request.tty.cols, rows: request.tty.rows, term } } : {},
        (err, channel) => (err ? reject(err) : resolve(channel)),
      );
    });
  }

  /**
   * A TCP connection to the port inside the session's workload (its own loopback, never the machine's), over the
   * machine's connection: an SSH `direct-tcpip` channel whose host is the session. Rejects with PORT_NOT_LISTENING
   * when the daemon could not connect there.
   */
  forward(link: Link, request: { sessionId: string; port: number }): Promise<ClientChannel> {
    return new Promise((resolve, reject) => {
      link.ssh.forwardOut('127.0.0.1', 0, request.sessionId, request.port, (err, channel) => {
        if (!err) resolve(channel);
        else if ((err as { reason?: number }).reason === CONNECT_FAILED) reject(portNotListening(request));
        else reject(err);
      });
    });
  }

  /**
   * A TCP connection to the port inside the session's workload, as a raw connection of the daemon's own: the daemon is
   * asked over the machine's connection (`gpu-dial`) to connect there and dial back with a one-time ticket
   * (`dialled`). It comes paused (what the program says first waits in it until joined). Rejects with
   * PORT_NOT_LISTENING when nothing listens on the port, `DialUnsupported` for a daemon without the subsystem.
   */
  dial(link: Link, request: { sessionId: string; port: number }): Promise<Duplex> {
    const ticket = randomBytes(24).toString('base64url');
    return new Promise<Duplex>((resolve, reject) => {
      let settled = false;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.dials.delete(ticket);
        fn();
      };
      const timer = setTimeout(
        () => settle(() => reject(new Error('the daemon did not dial back in time'))),
        DIAL_TIMEOUT_MS,
      );
      this.dials.set(ticket, {
        providerId: link.providerId,
        arrived: (socket) => {
          if (settled) {
            socket.destroy();
            return;
          }
          // The machine's connection went meanwhile: its streams with it.
          if (this.links.get(link.providerId) !== link) {
            socket.destroy();
            settle(() => reject(new Error("the machine's connection was lost")));
            return;
          }
          socket.pause();
          link.dialled.add(socket);
          socket.once('close', () => link.dialled.delete(socket));
          settle(() => resolve(socket));
        },
      });
      link.ssh.subsys(DIAL_SUBSYSTEM, (err, channel) => {
        if (err) return settle(() => reject(new DialUnsupported(err.message)));
        channel.on('error', () => {});
        let answer = '';
        channel.on('data', (d: Buffer) => {
          answer = `${answer}${String(d)}`.slice(0, 2000);
        });
        channel.once('close', () => {
          let said: { ok?: boolean; error?: string; message?: string } = {};
          try {
            said = JSON.parse(answer) as typeof said;
          } catch {
            // No answer: the connection went.
          }
          if (said.ok) return;
          if (said.error === 'refused') settle(() => reject(portNotListening(request)));
          else settle(() => reject(new Error(said.message ?? 'the daemon did not connect to the port')));
        });
        channel.end(`${JSON.stringify({ session_id: request.sessionId, port: request.port, ticket })}\n`);
      });
    });
  }

  /** Whether a dial-back with this ticket, from this machine, is awaited here. */
  awaitsDial(ticket: string, providerId: string): boolean {
    return this.dials.get(ticket)?.providerId === providerId;
  }

  /** The daemon's dial-back arrived (its ticket checked with `awaitsDial`): it goes to the stream that asked. */
  dialled(ticket: string, socket: Duplex): void {
    const pending = this.dials.get(ticket);
    if (pending) pending.arrived(socket);
    else socket.destroy();
  }

  /** Adds bytes a stream carried to its session's, recorded with its workload at the next flush. */
  private count(sessionId: string, bytes: { in: number; out: number }): void {
    if (bytes.in === 0 && bytes.out === 0) return;
    const sum = this.pending.get(sessionId) ?? { in: 0, out: 0 };
    sum.in += bytes.in;
    sum.out += bytes.out;
    this.pending.set(sessionId, sum);
  }

  /** What the stream carried since it was last recorded. */
  private unrecorded(stream: OpenStream): { in: number; out: number } {
    if (!stream.bytes) return { in: 0, out: 0 };
    const now = stream.bytes();
    const before = this.recorded.get(stream) ?? { in: 0, out: 0 };
    this.recorded.set(stream, now);
    return { in: now.in - before.in, out: now.out - before.out };
  }

  /** Records the bytes the sessions' streams carried since the last time, with their workloads. */
  private async recordBytes(): Promise<void> {
    for (const set of this.streams.values()) for (const s of set) this.count(s.sessionId, this.unrecorded(s));
    const counts = [...this.pending].map(([id, b]): [string, number, number] => [id, b.in, b.out]);
    this.pending = new Map();
    try {
      await addReachBytes(this.deps.db, counts);
    } catch (err) {
      this.deps.logger.warn({ err }, "reach: recording the streams' bytes failed");
      for (const [id, bytesIn, bytesOut] of counts) this.count(id, { in: bytesIn, out: bytesOut });
    }
  }

  /** Ends the streams whose session or workload is no longer running, or whose credential was withdrawn. */
  private endStale(): void {
    const ids = [...this.streams.keys()];
    if (ids.length === 0) return;
    // One check of each kind at a time: a slow database or auth service is not asked again while it still answers the
    // last, and a slow auth service does not hold back the ends of sessions (the database's word, every interval).
    this.checkAlone('sessions', () => this.endEnded(ids));
    this.checkAlone('credentials', () => this.endWithdrawn());
  }

  /** Runs `check` unless the last check of its `kind` is still under way (each logs its own failures). */
  private checkAlone(kind: keyof ReachRelay['checking'], check: () => Promise<void>): void {
    if (this.checking[kind]) return;
    this.checking[kind] = true;
    void check()
      .catch((err: unknown) => this.deps.logger.warn({ err }, `reach: checking the streams' ${kind} failed`))
      .finally(() => {
        this.checking[kind] = false;
      });
  }

  private async endEnded(ids: string[]): Promise<void> {
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

  /**
   * Asks the auth service whether the credentials that opened the streams still hold (a revoked API key, a sign-in
   * signed out): tokens are checked by their signature alone, and a stream outlives its token. An auth service that
   * cannot be asked leaves them open (and is asked again next time).
   */
  private async endWithdrawn(): Promise<void> {
    const ask = this.deps.credentialsLive;
    if (!ask) return;
    const byKey = new Map<string, { credential: StreamCredential; streams: OpenStream[] }>();
    for (const set of this.streams.values()) {
      for (const s of set) {
        if (!s.credential) continue;
        const key = `${s.credential.userId}/${s.credential.keyId ?? ''}/${s.credential.signInId ?? ''}`;
        const entry = byKey.get(key) ?? { credential: s.credential, streams: [] };
        entry.streams.push(s);
        byKey.set(key, entry);
      }
    }
    if (byKey.size === 0) return;
    const entries = [...byKey.values()];
    let live: boolean[];
    try {
      live = await ask(entries.map((e) => e.credential));
    } catch (err) {
      this.deps.logger.warn({ err }, "reach: checking the streams' credentials failed");
      return;
    }
    entries.forEach((e, i) => {
      if (live[i] !== false) return;
      for (const s of e.streams) s.end('the credential that opened it was withdrawn (a revoked key, a sign-out)');
    });
  }
}
