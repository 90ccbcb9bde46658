/**
 * Usage reports from provider daemons, as a test client that spreads them over several billing instances (like a
 * load balancer that takes an instance out when it refuses or does not answer) and over NATS JetStream. Every report
 * is remembered with how it was answered, so a test can check billing's data against what billing accepted.
 */
import type { Caller } from '@gpu/common/testing';
import type { Instance } from './instance.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A running session and the daemon that reports its usage. */
export interface ReportedSession {
  id: string;
  daemon: Caller;
}

/** One attempt to deliver a report: over HTTP to an instance, or published on NATS. */
export interface Attempt {
  sessionId: string;
  messageId: string;
  /** The instance's name, or `nats`. */
  via: string;
  sentAt: number;
  settled: boolean;
  /** When its answer (or failure) came. */
  settledAt?: number;
  /** HTTP: the status (undefined: no answer, the connection failed). NATS: 200 once JetStream stored it. */
  status?: number;
  /** HTTP 2xx: the usage record the answer names. */
  usageId?: string;
}

/** How a report is sent: `dup` sends each report to every live instance and twice on NATS (same message ID). */
export type Spread = 'dup' | 'one';

/** Publishes a usage message on NATS JetStream (resolves once stored). */
export type NatsSend = (sessionId: string, body: object, msgId: string, daemon: Caller) => Promise<unknown>;

export class UsageLoad {
  readonly attempts: Attempt[] = [];
  private stopped = false;
  private paused = false;
  private inFlight = 0;
  private readonly workers: Promise<void>[];

  constructor(
    sessions: ReportedSession[],
    private readonly instances: Instance[],
    private readonly nats: NatsSend,
    private readonly spread: Spread,
    /** Prefix of the message IDs (each load its own, so loads never share an ID). */
    private readonly tag: string,
  ) {
    this.workers = sessions.map((s, i) => this.worker(s, i));
  }

  private async worker(s: ReportedSession, turn: number) {
    for (let k = 1; !this.stopped; k++) {
      const live = this.instances.filter((i) => i.up);
      if (this.paused || live.length === 0) {
        await sleep(10);
        k--;
        continue;
      }
      const body = (messageId: string) => ({
        session_id: s.id,
        timestamp: new Date().toISOString(),
        gpu_utilization: 80,
        power_draw_w: 250 + (k % 50),
        message_id: messageId,
      });
      const sends: Promise<void>[] = [];
      if (this.spread === 'dup') {
        // The same report (one message ID) to every live instance at once and twice on NATS.
        const id = `${this.tag}:${k}`;
        for (const target of live) sends.push(this.http(target, s, id, body(id)));
        sends.push(this.publish(s, id, body(id), `${s.id}:${id}`));
        if (k % 3 === 0) sends.push(this.publish(s, id, body(id), `${s.id}:${id}:again`));
      } else {
        // Distinct reports: one to one instance (round robin), one on NATS.
        const target = live[turn++ % live.length] as Instance;
        const httpId = `${this.tag}:h${k}`;
        const natsId = `${this.tag}:n${k}`;
        sends.push(this.http(target, s, httpId, body(httpId)));
        sends.push(this.publish(s, natsId, body(natsId), `${s.id}:${natsId}`));
      }
      await Promise.all(sends);
      await sleep(20);
    }
  }

  /**
   * One report of `session` to `target` now, tracked like the workers' (a request the test knows it sent there:
   * with the sessions locked, it waits inside the instance until they are released).
   */
  sendTo(target: Instance, session: ReportedSession): Promise<void> {
    const messageId = `${this.tag}:x${this.attempts.length}`;
    return this.http(target, session, messageId, {
      session_id: session.id,
      timestamp: new Date().toISOString(),
      gpu_utilization: 80,
      power_draw_w: 250,
      message_id: messageId,
    });
  }

  private async http(target: Instance, s: ReportedSession, messageId: string, body: object) {
    const a = this.track({ sessionId: s.id, messageId, via: target.name });
    try {
      const res = await fetch(`${target.url}/api/v1/billing/usage-update`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...s.daemon.headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(20_000),
      });
      const text = await res.text();
      a.status = res.status;
      if (res.ok) a.usageId = (JSON.parse(text) as { usage: { id: string } }).usage.id;
      // 503: the instance is shutting down and took nothing; the client sends elsewhere from now on.
      if (res.status === 503) target.up = false;
    } catch (err) {
      // Refused (the instance is gone) or cut off with the request in flight while its process exited: the client
      // sends elsewhere. A connection that broke while the process lives on (a kept-alive socket closed on a busy
      // machine) is not taken for the instance going away: it would get no more requests for the rest of the test.
      const cause = (err as { cause?: { code?: string } }).cause;
      if (cause?.code === 'ECONNREFUSED' || !target.alive()) target.up = false;
    } finally {
      this.settle(a);
    }
  }

  private async publish(s: ReportedSession, messageId: string, body: object, msgId: string) {
    const a = this.track({ sessionId: s.id, messageId, via: 'nats' });
    try {
      await this.nats(s.id, body, msgId, s.daemon);
      a.status = 200;
    } catch {
      // Not stored by JetStream: nothing to expect of it.
    } finally {
      this.settle(a);
    }
  }

  private track(a: Pick<Attempt, 'sessionId' | 'messageId' | 'via'>): Attempt {
    const attempt: Attempt = { ...a, sentAt: Date.now(), settled: false };
    this.attempts.push(attempt);
    this.inFlight += 1;
    return attempt;
  }

  private settle(a: Attempt) {
    a.settled = true;
    a.settledAt = Date.now();
    this.inFlight -= 1;
  }

  /** HTTP requests to `instance` not answered yet, sent at least `ageMs` ago. */
  inFlightTo(instance: string, ageMs = 0): Attempt[] {
    const before = Date.now() - ageMs;
    return this.attempts.filter((x) => x.via === instance && !x.settled && x.sentAt <= before);
  }

  /** Sends nothing new until resume(); resolves when nothing is in flight. */
  async pause() {
    this.paused = true;
    while (this.inFlight > 0) await sleep(5);
  }

  resume() {
    this.paused = false;
  }

  async stop() {
    this.stopped = true;
    await Promise.all(this.workers);
  }
}

/** Whether an attempt was accepted: an HTTP 2xx, or stored by JetStream. */
export const accepted = (a: Attempt) => a.status !== undefined && a.status >= 200 && a.status < 300;
