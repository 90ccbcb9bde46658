/**
 * Event publishing over NATS for every service: JSON messages on configurable
 * subjects, each with a unique `Nats-Msg-Id` (JetStream de-duplication) and
 * the caller's `X-Correlation-ID`. With a stream configured, messages go
 * through JetStream and are acknowledged by the server; without one they are
 * plain core-NATS publishes. `NoopPublisher` stands in when no NATS URL is
 * configured, so callers never branch on "is messaging on".
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type JetStreamClient, jetstream, jetstreamManager } from '@nats-io/jetstream';
import {
  type Authenticator,
  connect,
  credsAuthenticator,
  type NatsConnection,
  headers as natsHeaders,
} from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { activeTraceContext } from '../telemetry/tracing.ts';
import { type EnsureStreamOptions, ensureStream } from './stream.ts';

/** Per-message options. */
export interface PublishOptions {
  /** Put on the message as `X-Correlation-ID`; a new UUID when absent. */
  correlationId?: string;
  /** The message's `Nats-Msg-Id`; a new UUID when absent. Reuse it to make a retried publish idempotent. */
  msgId?: string;
  /** Extra headers. */
  headers?: Record<string, string>;
}

/** What a service needs to emit events; implemented over NATS and as a no-op. */
export interface EventPublisher {
  /** Whether messages actually leave the process (false for the no-op publisher). */
  readonly enabled: boolean;
  /** Publishes `data` as JSON; resolves with the message ID once NATS (or JetStream) accepted it. */
  publish(subject: string, data: unknown, opts?: PublishOptions): Promise<string>;
  /** Resolves when the connection is usable (for health checks); rejects at once while it is lost. */
  ping(): Promise<void>;
  /** Flushes pending messages and closes the connection. */
  close(): Promise<void>;
}

export interface ConnectPublisherOptions {
  /** `nats://host:port` (comma-separated for a cluster); empty gives a `NoopPublisher`. */
  url?: string;
  /** Connection name shown by the server (the service name). */
  name?: string;
  /**
   * A `.creds` file (a user JWT and its seed, `nats-auth.ts`) for a server in operator mode; empty or absent: connect
   * without credentials. Read at each connection, so a renewed file is used from the next reconnect on.
   */
  credentials?: string;
  /** How to authenticate instead of `credentials` (a provider daemon's issued user: a JWT it renews). */
  authenticator?: Authenticator;
  /** The prefix of this connection's inboxes (a user that may subscribe only to `<prefix>.>`). */
  inboxPrefix?: string;
  /** When set, the stream is created or extended to cover these subjects and publishes are acknowledged. */
  stream?: EnsureStreamOptions;
  /**
   * With `stream`: false leaves the stream as its owner made it (a user without JetStream API permissions: a provider
   * daemon's), publishes still acknowledged. Default true.
   */
  ensureStream?: boolean;
  /** How long start-up keeps retrying the first connection (default 30 s). */
  connectTimeoutMs?: number;
  /** How long a JetStream publish waits for its acknowledgement (default 5 s). */
  publishTimeoutMs?: number;
  logger?: Logger;
}

/** A publisher that drops every message; used when no NATS URL is configured. */
export class NoopPublisher implements EventPublisher {
  readonly enabled = false;
  async publish(_subject: string, _data: unknown, opts: PublishOptions = {}): Promise<string> {
    return opts.msgId ?? randomUUID();
  }
  async ping(): Promise<void> {}
  async close(): Promise<void> {}
}

/** Publisher over a live NATS connection. Build it with `connectPublisher`. */
export class NatsPublisher implements EventPublisher {
  readonly enabled = true;
  private readonly js?: JetStreamClient;
  /** False from a `disconnect` until the client's `reconnect` (it retries by itself). */
  private live = true;

  constructor(
    readonly connection: NatsConnection,
    useJetStream: boolean,
    private readonly publishTimeoutMs = 5000,
  ) {
    if (useJetStream) this.js = jetstream(connection, { timeout: publishTimeoutMs });
    void this.follow();
  }

  /** Whether the connection is up now (the `nats_connected` gauge, the health check). */
  get connected(): boolean {
    return this.live && !this.connection.isClosed();
  }

  private async follow(): Promise<void> {
    for await (const s of this.connection.status()) {
      if (s.type === 'disconnect') this.live = false;
      else if (s.type === 'reconnect') this.live = true;
    }
  }

  async publish(subject: string, data: unknown, opts: PublishOptions = {}): Promise<string> {
    const msgId = opts.msgId ?? randomUUID();
    const h = natsHeaders();
    h.set('Nats-Msg-Id', msgId);
    h.set('X-Correlation-ID', opts.correlationId ?? randomUUID());
    for (const [k, v] of Object.entries(opts.headers ?? {})) h.set(k, v);
    // The active trace (tracing on only): the consumers' spans become its children.
    for (const [k, v] of Object.entries(activeTraceContext() ?? {})) h.set(k, v);
    h.set('Content-Type', 'application/json');
    const payload = JSON.stringify(data);
    if (this.js) {
      await this.js.publish(subject, payload, { msgID: msgId, headers: h, timeout: this.publishTimeoutMs });
    } else {
      this.connection.publish(subject, payload, { headers: h });
    }
    return msgId;
  }

  async ping(): Promise<void> {
    if (this.connection.isClosed()) throw new Error('NATS connection is closed');
    // A flush while the client reconnects would wait for the server's answer: say so instead.
    if (!this.live) throw new Error('NATS connection is lost (reconnecting)');
    // The server gone before the client said so (its status event comes after): the same answer.
    await this.connection.flush().catch((err: Error) => {
      throw new Error(`NATS connection is lost (${err.message})`);
    });
  }

  /** Drains the connection; while it is lost (nothing to drain to), closes it. Never rejects. */
  async close(): Promise<void> {
    if (this.connection.isClosed()) return;
    if (this.live) await this.connection.drain().catch(() => {});
    if (!this.connection.isClosed()) await this.connection.close().catch(() => {});
  }
}

/**
 * Connects to NATS, retrying the first connection with bounded backoff until
 * `connectTimeoutMs`; afterwards the client reconnects by itself forever.
 * Returns a `NoopPublisher` when `url` is empty.
 */
export async function connectPublisher(opts: ConnectPublisherOptions): Promise<EventPublisher> {
  if (!opts.url) {
    opts.logger?.info('no NATS URL configured: events are not published');
    return new NoopPublisher();
  }
  const servers = opts.url.split(',').map((s) => s.trim());
  const deadline = Date.now() + (opts.connectTimeoutMs ?? 30_000);
  let delay = 100;
  let connection: NatsConnection | undefined;
  for (;;) {
    try {
      connection = await connect({
        servers,
        name: opts.name,
        // A renewed user comes after the server refused the earlier one (a daemon's that expired; a service's that a
        // new set-up revoked, whose creds file is replaced when its Secret is): keep reconnecting through auth errors
        // rather than give up after two.
        ...(opts.credentials ? { authenticator: fileCredentials(opts.credentials), ignoreAuthErrorAbort: true } : {}),
        ...(opts.authenticator ? { authenticator: opts.authenticator, ignoreAuthErrorAbort: true } : {}),
        ...(opts.inboxPrefix ? { inboxPrefix: opts.inboxPrefix } : {}),
        // No stack captured for each request and flush in case it times out: two Errors a request, a quarter of a
        // daemon's CPU per usage request (the timeout's message still names what timed out).
        noAsyncTraces: true,
        reconnect: true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 1000,
        timeout: 5000,
      });
      break;
    } catch (err) {
      if (Date.now() + delay > deadline) {
        throw new Error(`cannot connect to NATS at ${opts.url}: ${(err as Error).message}`, { cause: err });
      }
      opts.logger?.warn({ err: (err as Error).message, retry_in_ms: delay }, 'NATS not reachable yet, retrying');
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2000);
    }
  }
  void watchStatus(connection, opts.logger);
  if (opts.stream && opts.ensureStream !== false) {
    const jsm = await jetstreamManager(connection);
    await ensureStream(jsm, opts.stream);
  }
  opts.logger?.info({ url: opts.url, stream: opts.stream?.name }, 'connected to NATS');
  return new NatsPublisher(connection, opts.stream !== undefined, opts.publishTimeoutMs);
}

/** Authenticates with the `.creds` file at `path`, read afresh at each (re)connection. */
export function fileCredentials(path: string): Authenticator {
  return (nonce?: string) => credsAuthenticator(readFileSync(path))(nonce);
}

async function watchStatus(connection: NatsConnection, logger?: Logger): Promise<void> {
  if (!logger) return;
  for await (const s of connection.status()) {
    if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'error') {
      logger.warn({ nats_status: s.type }, 'NATS connection status changed');
    }
  }
}
