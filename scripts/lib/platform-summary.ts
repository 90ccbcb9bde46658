/**
 * `pnpm start`'s periodic summary: what the platform did since the last one, in one line at the terminal. The figures
 * are the services' own: each service's `/metrics` counts the requests it answered (`http_requests_total`, by route
 * and status; its `/health` and `/metrics` routes left out, which pollers call), billing's `billing_sessions_running`
 * says how many rentals run now, and the warnings and errors are those the terminal showed (scripts/lib/
 * platform-output.ts). A service restarted meanwhile counts from its new start.
 *
 *   const summary = new PlatformSummary(services);      // [{ name, url }]
 *   const line = await summary.next(output.logged());    // undefined: nothing happened, nothing running
 */

/** A service whose `/metrics` is read. */
export interface SummarizedService {
  name: string;
  /** Its base URL (`http://127.0.0.1:8003`). */
  url: string;
}

/** What one service's `/metrics` says now. */
export interface ServiceFigures {
  /** Requests answered since it started, and those answered 5xx. */
  requests: number;
  failed: number;
  /** Rentals running now (billing alone says). */
  sessionsRunning?: number;
}

/** Reads the figures from a Prometheus text exposition. */
export function figuresOf(metrics: string): ServiceFigures {
  const figures: ServiceFigures = { requests: 0, failed: 0 };
  for (const line of metrics.split('\n')) {
    const request = /^http_requests_total\{([^}]*)\} (\S+)$/.exec(line);
    if (request) {
      const route = /(?:^|,)route="([^"]*)"/.exec(request[1] ?? '')?.[1] ?? '';
      if (route === '/metrics' || route === '/health' || route.startsWith('/health/')) continue;
      const count = Number(request[2]);
      figures.requests += count;
      if (/(?:^|,)status_code="5\d\d"/.test(request[1] ?? '')) figures.failed += count;
      continue;
    }
    const running = /^billing_sessions_running(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (running) figures.sessionsRunning = (figures.sessionsRunning ?? 0) + Number(running[1]);
  }
  return figures;
}

const plural = (n: number, one: string, many = `${one}s`) => `${n === 0 ? 'no' : n} ${n === 1 ? one : many}`;

/** The summary's line for a minute, or undefined for a quiet period (no request, nothing logged, no rental running). */
export function summaryLine(
  period: { requests: number; failed: number; sessionsRunning?: number; unread: string[] },
  logged: { warnings: number; errors: number },
): string | undefined {
  const quiet =
    period.requests === 0 && logged.warnings + logged.errors === 0 && !period.sessionsRunning && !period.unread.length;
  if (quiet) return undefined;
  const parts = [
    `${plural(period.requests, 'request')} answered${period.failed > 0 ? ` (${period.failed} with 5xx)` : ''}`,
    ...(period.sessionsRunning === undefined ? [] : [`${plural(period.sessionsRunning, 'session')} running`]),
    `${plural(logged.warnings, 'warning')} and ${plural(logged.errors, 'error')} logged`,
    ...(period.unread.length > 0 ? [`no figures from ${period.unread.join(', ')}`] : []),
  ];
  return `[start] the last minute: ${parts.join(', ')}`;
}

export class PlatformSummary {
  /** Each service's request counts at the last reading. */
  private readonly last = new Map<string, ServiceFigures>();

  constructor(private readonly services: readonly SummarizedService[]) {}

  /** Reads every service's figures now and makes the line for the period since the last call. */
  async next(logged: { warnings: number; errors: number }): Promise<string | undefined> {
    const read = await Promise.all(
      this.services.map(async (s) => {
        try {
          const res = await fetch(`${s.url}/metrics`, { signal: AbortSignal.timeout(5000) });
          return res.ok ? figuresOf(await res.text()) : undefined;
        } catch {
          return undefined;
        }
      }),
    );
    const period = { requests: 0, failed: 0, sessionsRunning: undefined as number | undefined, unread: [] as string[] };
    this.services.forEach((service, i) => {
      const now = read[i];
      if (!now) {
        period.unread.push(service.name);
        return;
      }
      const before = this.last.get(service.name) ?? { requests: 0, failed: 0 };
      // Fewer than before: the service started again, counting from zero.
      const restarted = now.requests < before.requests;
      period.requests += restarted ? now.requests : now.requests - before.requests;
      period.failed += restarted ? now.failed : now.failed - before.failed;
      if (now.sessionsRunning !== undefined)
        period.sessionsRunning = (period.sessionsRunning ?? 0) + now.sessionsRunning;
      this.last.set(service.name, now);
    });
    return summaryLine(period, logged);
  }
}
