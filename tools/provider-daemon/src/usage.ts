/**
 * Usage reports to billing, for every running session on this machine. The daemon asks billing which sessions run
 * here (`GET /billing/sessions?provider_id=…&status=running`, its token sees only its owner's machines) and which of
 * the machine's GPUs each one rents (`gpu_indices`: positions in the machine's GPU list as the daemon registered it,
 * the driver's order), and reports each one's usage: the utilization and power draw of its own GPUs now (of every GPU
 * for a session that names none: a whole-machine rental).
 *
 * One report per session and minute: the message ID is `<session>:<minute since the epoch>`, so a report sent twice
 * (a retry, a restart within the minute, a heartbeat twice a minute) is applied once; billing bills elapsed time by
 * its own clock, so a report never adds a minute of its own.
 *
 * Over NATS when `nats_url` is set: each report on `<usage_subject>.<session>` to JetStream, the daemon's token in an
 * `Authorization` header and a random `Nats-Msg-Id` (the report's `message_id` de-duplicates it at billing); with a
 * NATS user of its own (nats-user.ts), as core NATS requests with no token on
 * `<usage_reports_subject>.<owner>.<client>.<provider>`, the reports of sessions without a kept trace together
 * (`{reports: [...]}`, up to 256 a request), each one whose trace is kept alone carrying its trace, answered by billing once
 * applied (never into a stream: nats-server would send a stream's acknowledgement wherever the publisher says, and a
 * daemon's user may publish into none). Over HTTP (`POST /billing/usage-updates`, up to 256 reports a request) without
 * NATS, and for any report NATS did not take: a publish not acknowledged, a request not answered (no billing
 * instance listening, a timeout) or answered with a failure of billing's (5xx).
 *
 * Each report continues its session's trace (`session-trace.ts`: the context billing hands with the session, in a
 * span of the daemon's own when it traces): over HTTP a session's report then goes in a request of its own, which
 * carries that trace, where the trace is kept (its sampled flag); the reports of sessions without one, or whose trace
 * is not kept (no hop makes a span of it), share requests.
 */
import { billingClient, endlessListGuard, type TokenSource, unwrap } from '@gpu/client';
import { activeTraceContext, durationMs, type EventPublisher, type Logger, PAGE_LIMIT } from '@gpu/common';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import type { DaemonConfig } from './config.ts';
import type { GpuReading } from './gpu/nvidia-smi.ts';
import { SessionTraces, type TraceContext } from './session-trace.ts';

const MINUTE_MS = 60_000;
const MAX_REPORTS_PER_REQUEST = 256;

interface UsageReport {
  session_id: string;
  timestamp: string;
  gpu_utilization: number;
  power_draw_w: number;
  metrics: Record<string, unknown>;
  message_id: string;
}

/** A session running on the machine and the GPUs it rents (null: every GPU). */
export interface RunningSession {
  id: string;
  gpuIndices: number[] | null;
  /** Whether it runs a workload (workloads/runner.ts). */
  workload: boolean;
}

/** The readings of the session's GPUs: those at its indices in the machine's GPU list. */
function readingsOf(session: RunningSession, readings: GpuReading[]): GpuReading[] {
  if (!session.gpuIndices) return readings;
  const mine = new Set(session.gpuIndices);
  return readings.filter((_, index) => mine.has(index));
}

/** The reports of one moment for the given sessions, each from the readings of its own GPUs. */
function usageReports(sessions: RunningSession[], readings: GpuReading[], now: Date): UsageReport[] {
  const minute = Math.floor(now.getTime() / MINUTE_MS);
  return sessions.map((session) => {
    const own = readingsOf(session, readings);
    const utilization = own.length ? own.reduce((sum, r) => sum + (r.utilizationGpu ?? 0), 0) / own.length : 0;
    return {
      session_id: session.id,
      timestamp: now.toISOString(),
      gpu_utilization: Math.min(100, Math.max(0, Math.round(utilization * 100) / 100)),
      power_draw_w: own.reduce((sum, r) => sum + (r.powerDraw ?? 0), 0),
      metrics: { gpus: own.length, minute },
      message_id: `${session.id}:${minute}`,
    };
  });
}

export interface UsageReporterDeps {
  config: DaemonConfig;
  logger: Logger;
  token: TokenSource;
  /** NATS (JetStream) when configured; a disabled publisher sends everything over HTTP. */
  publisher: EventPublisher;
  /**
   * The daemon's own NATS user's owner and client (nats-user.ts), and its connection: reports go as requests on
   * subjects that name them, with no token.
   */
  natsIdentity?: { owner: string; client: string; connection: Pick<NatsConnection, 'request'> };
  /**
   * Whether the NATS connection is up now (the publisher's `connected`); absent: taken as up. While it is lost every
   * report goes over HTTP at once, not after a request's timeout.
   */
  natsLive?: () => boolean;
}

/** Billing's answer to a usage request: one result per report, in order, or the request's problem. */
interface UsageRequestAnswer {
  results?: { status: number; code?: string; detail?: string }[];
  problem?: { status: number; code: string; detail: string };
}

/** The most pages of running sessions the daemon reads past the first (a machine's sessions fill one). */
const MAX_SESSION_PAGES = 10;

export class UsageReporter {
  private readonly billing;
  /** The trace of each session billing listed (the workload runner's reports continue it too). */
  readonly traces = new SessionTraces();

  constructor(private readonly deps: UsageReporterDeps) {
    this.billing = billingClient({
      baseUrl: deps.config.billing_url,
      token: deps.token,
      timeoutMs: durationMs(deps.config.request_timeout),
    });
  }

  /**
   * The running sessions on the machine, every page; throws for a list that does not end (a cursor given twice, or
   * more pages than a machine's sessions fill: each holds a GPU of its 64 at most), which would hold the heartbeat.
   */
  async runningSessions(providerId: string): Promise<RunningSession[]> {
    const sessions: RunningSession[] = [];
    const guard = endlessListGuard(MAX_SESSION_PAGES);
    let cursor: string | undefined;
    do {
      if (cursor !== undefined) guard(cursor);
      const result = await this.billing.GET('/api/v1/billing/sessions', {
        params: {
          query: { provider_id: providerId, status: ['running'], limit: PAGE_LIMIT.max, ...(cursor ? { cursor } : {}) },
        },
      });
      for (const s of unwrap(result)) {
        sessions.push({ id: s.id, gpuIndices: s.gpu_indices ?? null, workload: s.workload === true });
        this.traces.remember(s.id, s.trace_context);
      }
      // The platform's paging contract: the next page's cursor is in `X-Next-Cursor`, absent on the last page.
      cursor = result.response.headers.get('x-next-cursor') ?? undefined;
    } while (cursor);
    return sessions;
  }

  /** Reports the usage of every running session on the machine; the number of reports sent. */
  async report(providerId: string, readings: GpuReading[], now = new Date()): Promise<number> {
    const reports = usageReports(await this.runningSessions(providerId), readings, now);
    if (reports.length === 0) return 0;
    const overHttp: UsageReport[] = [];
    const identity = this.deps.natsIdentity;
    const live = this.deps.natsLive?.() ?? true;
    if (!live) {
      overHttp.push(...reports);
    } else if (identity) {
      overHttp.push(...(await this.request(identity, providerId, reports)));
    } else if (this.deps.publisher.enabled) {
      const auth = { Authorization: `Bearer ${await this.deps.token.get()}` };
      const prefix = this.deps.config.usage_subject;
      const sent = await Promise.allSettled(
        reports.map((r) =>
          this.traces.report(r.session_id, `publish ${prefix}.${r.session_id}`, 'producer', (trace) =>
            // A message ID of its own (random): the report's `message_id` de-duplicates it at billing, and a
            // predictable stream ID would let whoever publishes it first have the real report dropped.
            this.deps.publisher.publish(`${prefix}.${r.session_id}`, r, { headers: { ...trace, ...auth } }),
          ),
        ),
      );
      sent.forEach((s, i) => {
        if (s.status === 'rejected') overHttp.push(reports[i]!);
      });
    } else {
      overHttp.push(...reports);
    }
    if (overHttp.length && (identity || this.deps.publisher.enabled)) {
      this.deps.logger.warn(
        { reports: overHttp.length },
        'NATS did not take some usage reports: sending them over HTTP',
      );
    }
    // A report of a session whose trace is kept in a request of its own, in its trace; the others together (a trace not
    // kept makes no span anywhere), as many as a request takes.
    const untraced = overHttp.filter((r) => !this.traces.kept(r.session_id));
    for (const r of overHttp.filter((r) => this.traces.kept(r.session_id))) {
      await this.traces.report(r.session_id, 'report usage', 'internal', (trace) => this.post([r], trace));
    }
    for (let i = 0; i < untraced.length; i += MAX_REPORTS_PER_REQUEST) {
      await this.post(untraced.slice(i, i + MAX_REPORTS_PER_REQUEST), {});
    }
    return reports.length;
  }

  /**
   * Sends the reports as NATS requests on the machine's subject that names the daemon: those of sessions without a
   * kept trace together (up to 256 a request), each of a kept trace alone, in its trace. The reports to send over HTTP instead:
   * those of a request not answered, and those billing failed (5xx); those it refused are logged.
   */
  private async request(
    identity: NonNullable<UsageReporterDeps['natsIdentity']>,
    providerId: string,
    reports: UsageReport[],
  ): Promise<UsageReport[]> {
    const subject = `${this.deps.config.usage_reports_subject}.${identity.owner}.${identity.client}.${providerId}`;
    const timeout = durationMs(this.deps.config.request_timeout);
    // `trace`: the session's trace context when the daemon does not trace itself (session-trace.ts), else its span's.
    const ask = async (some: UsageReport[], trace: TraceContext = {}): Promise<UsageReport[]> => {
      const h = natsHeaders();
      for (const [k, v] of Object.entries({ ...trace, ...activeTraceContext() })) h.set(k, v);
      let answer: UsageRequestAnswer;
      try {
        const msg = await identity.connection.request(subject, JSON.stringify({ reports: some }), {
          timeout,
          headers: h,
        });
        answer = msg.json<UsageRequestAnswer>();
      } catch {
        return some;
      }
      if (typeof answer !== 'object' || answer === null) return some;
      if (answer.problem) {
        this.deps.logger.warn({ problem: answer.problem }, 'billing refused a usage request');
        // Billing too busy (503): over HTTP; a malformed request would be refused there too.
        return !(answer.problem.status < 500) ? some : [];
      }
      if (answer.results?.length !== some.length) return some;
      return some.filter((r, i) => {
        const result = answer.results![i]!;
        if (result.status >= 400 && result.status < 500) {
          this.deps.logger.warn({ session_id: r.session_id, result }, 'billing refused a usage report');
        }
        return result.status >= 500;
      });
    };
    const together = reports.filter((r) => !this.traces.kept(r.session_id));
    const alone = reports.filter((r) => this.traces.kept(r.session_id));
    const sent = await Promise.all([
      ...alone.map((r) => this.traces.report(r.session_id, `send ${subject}`, 'producer', (trace) => ask([r], trace))),
      ...Array.from({ length: Math.ceil(together.length / MAX_REPORTS_PER_REQUEST) }, (_, i) =>
        ask(together.slice(i * MAX_REPORTS_PER_REQUEST, (i + 1) * MAX_REPORTS_PER_REQUEST)),
      ),
    ]);
    return sent.flat();
  }

  /** Sends reports in one request (`headers`: the trace context it carries, if any); logs those billing refused. */
  private async post(reports: UsageReport[], headers: TraceContext): Promise<void> {
    const answer = unwrap(await this.billing.POST('/api/v1/billing/usage-updates', { body: { reports }, headers }));
    for (const r of answer.results) {
      if (r.status >= 400) this.deps.logger.warn({ result: r }, 'billing refused a usage report');
    }
  }
}
