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
 * Over NATS when `nats_url` is set (subject `<usage_subject>.<session>`, the daemon's token in an `Authorization`
 * header; with a NATS user of its own, no token, and the reports of sessions without a trace in one message
 * `{reports: [...]}` on `<usage_subject>.<owner>.<client>.<provider>` (a traced one alone on
 * `<usage_subject>.<owner>.<client>.<session>`, carrying its trace); each message a random `Nats-Msg-Id` (the
 * reports' `message_id`s de-duplicate them at billing), acknowledged by
 * JetStream); over HTTP (`POST /billing/usage-updates`, up to
 * 256 reports a request) without NATS, or for any report a NATS publish did not get acknowledged.
 *
 * Each report continues its session's trace (`session-trace.ts`: the context billing hands with the session, in a
 * span of the daemon's own when it traces): over HTTP a session's report then goes in a request of its own, which
 * carries that trace; the reports of sessions without one share requests as before.
 */
import { billingClient, type TokenSource, unwrap } from '@gpu/client';
import { durationMs, type EventPublisher, type Logger, PAGE_LIMIT } from '@gpu/common';
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
  /** The daemon's own NATS user's owner and client (nats-user.ts): subjects name them, no token on a report. */
  natsIdentity?: { owner: string; client: string };
}

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

  /** The running sessions on the machine, every page. */
  async runningSessions(providerId: string): Promise<RunningSession[]> {
    const sessions: RunningSession[] = [];
    let cursor: string | undefined;
    do {
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
    if (this.deps.publisher.enabled) {
      const identity = this.deps.natsIdentity;
      const auth: Record<string, string> = identity ? {} : { Authorization: `Bearer ${await this.deps.token.get()}` };
      const prefix = identity
        ? `${this.deps.config.usage_subject}.${identity.owner}.${identity.client}`
        : this.deps.config.usage_subject;
      // With a NATS user of its own, the reports of sessions without a trace go together, up to 256 a message, on the
      // machine's subject; each traced one goes alone, carrying its trace.
      const together = identity ? reports.filter((r) => !this.traces.of(r.session_id)) : [];
      const alone = identity ? reports.filter((r) => this.traces.of(r.session_id)) : reports;
      const batches: UsageReport[][] = [];
      for (let i = 0; i < together.length; i += MAX_REPORTS_PER_REQUEST) {
        batches.push(together.slice(i, i + MAX_REPORTS_PER_REQUEST));
      }
      const [sentAlone, sentTogether] = await Promise.all([
        Promise.allSettled(
          alone.map((r) =>
            this.traces.report(r.session_id, `publish ${prefix}.${r.session_id}`, 'producer', (trace) =>
              // A message ID of its own (random): the report's `message_id` de-duplicates it at billing, and a
              // predictable stream ID would let whoever publishes it first have the real report dropped.
              this.deps.publisher.publish(`${prefix}.${r.session_id}`, r, { headers: { ...trace, ...auth } }),
            ),
          ),
        ),
        Promise.allSettled(batches.map((b) => this.deps.publisher.publish(`${prefix}.${providerId}`, { reports: b }))),
      ]);
      sentAlone.forEach((s, i) => {
        if (s.status === 'rejected') overHttp.push(alone[i]!);
      });
      sentTogether.forEach((s, i) => {
        if (s.status === 'rejected') overHttp.push(...batches[i]!);
      });
      if (overHttp.length) {
        this.deps.logger.warn(
          { reports: overHttp.length },
          'NATS did not take some usage reports: sending them over HTTP',
        );
      }
    } else {
      overHttp.push(...reports);
    }
    // A traced session's report in a request of its own, in its trace; the others together, as many as a request takes.
    const untraced = overHttp.filter((r) => !this.traces.of(r.session_id));
    for (const r of overHttp.filter((r) => this.traces.of(r.session_id))) {
      await this.traces.report(r.session_id, 'report usage', 'internal', (trace) => this.post([r], trace));
    }
    for (let i = 0; i < untraced.length; i += MAX_REPORTS_PER_REQUEST) {
      await this.post(untraced.slice(i, i + MAX_REPORTS_PER_REQUEST), {});
    }
    return reports.length;
  }

  /** Sends reports in one request (`headers`: the trace context it carries, if any); logs those billing refused. */
  private async post(reports: UsageReport[], headers: TraceContext): Promise<void> {
    const answer = unwrap(await this.billing.POST('/api/v1/billing/usage-updates', { body: { reports }, headers }));
    for (const r of answer.results) {
      if (r.status >= 400) this.deps.logger.warn({ result: r }, 'billing refused a usage report');
    }
  }
}
