/**
 * What `pnpm start` shows at its terminal and keeps in its log files (scripts/lib/platform-output.ts), and its summary
 * each minute (scripts/lib/platform-summary.ts), on the lines and figures the services really write. The whole
 * platform's terminal is checked in tests/start.test.ts.
 */
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PlatformOutput, terminalLine } from '../scripts/lib/platform-output.ts';
import { figuresOf, summaryLine } from '../scripts/lib/platform-summary.ts';

// Lines as billing wrote them under pnpm start.
const request =
  '{"level":"info","time":"2026-11-27T10:42:08.574Z","service":"billing-service","instance_id":"9f","request_id":"15",' +
  '"req":{"method":"GET","url":"/api/v1/pricing/rates"},"msg":"incoming request"}';
const warning =
  '{"level":"warn","time":"2026-11-27T10:46:00.774Z","service":"billing-service","instance_id":"02","err":"fetch failed",' +
  '"event_id":"b4","failing_for_ms":31000,"msg":"event publish failing for 31 s; will retry"}';

describe("pnpm start's terminal", () => {
  it('shows a warning or an error in one short line, what is no log line as it is, and nothing below warn', () => {
    expect(terminalLine(request)).toBeUndefined();
    expect(terminalLine(warning)).toEqual({
      text: 'warn: event publish failing for 31 s; will retry (err: fetch failed, event_id: b4, failing_for_ms: 31000)',
      counts: 'warnings',
    });
    // pino's numeric levels, and an error's message rather than its stack.
    expect(
      terminalLine(
        '{"level":50,"time":1,"msg":"reconciliation failed","err":{"type":"Error","message":"boom","stack":"..."}}',
      ),
    ).toEqual({ text: 'error: reconciliation failed (err: boom)', counts: 'errors' });
    expect(terminalLine('s3rver listening on http://127.0.0.1:9000')).toEqual({
      text: 's3rver listening on http://127.0.0.1:9000',
    });
    expect(terminalLine('{not json')).toEqual({ text: '{not json' });
    // The embedded nats-server's lines: its warnings and errors shown as the services' are, its information not.
    expect(terminalLine('[21197] 2026/11/28 02:18:37.635139 [INF] Server is ready')).toBeUndefined();
    expect(terminalLine('[21197] 2026/11/28 02:18:38.000001 [ERR] 127.0.0.1:5 - cid:9 - authentication error')).toEqual(
      {
        text: 'error: 127.0.0.1:5 - cid:9 - authentication error',
        counts: 'errors',
      },
    );
    expect(terminalLine('[21197] 2026/11/28 02:18:38.000002 [WRN] Slow consumer')).toEqual({
      text: 'warn: Slow consumer',
      counts: 'warnings',
    });
  });

  it('keeps every line in the process log file, moved aside past its size, and counts what it showed', () => {
    const dir = path.join(mkdtempSync(path.join(tmpdir(), 'platform-output-')), 'logs');
    const shown: string[] = [];
    const output = new PlatformOutput(dir, (line) => shown.push(line), 1000);
    output.line('billing', request);
    output.line('billing', warning);
    output.line('s3', 's3rver listening');
    expect(shown).toEqual([`[billing] ${terminalLine(warning)?.text}`, '[s3] s3rver listening']);
    expect(readFileSync(path.join(dir, 'billing.log'), 'utf8')).toBe(`${request}\n${warning}\n`);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(output.logged()).toEqual({ warnings: 1, errors: 0 });
    expect(output.logged()).toEqual({ warnings: 0, errors: 0 });
    // Past 1000 bytes the file starts anew, the one before kept as .1.
    for (let i = 0; i < 8; i++) output.line('billing', request);
    expect(readFileSync(path.join(dir, 'billing.log.1'), 'utf8')).toContain(warning);
    expect(statSync(path.join(dir, 'billing.log')).size).toBeLessThan(1000);
    // After its last line, the processes' lines go to their files alone.
    output.closeTerminal();
    output.line('s3', 'shutting down');
    expect(shown).toHaveLength(2);
    expect(readFileSync(path.join(dir, 's3.log'), 'utf8')).toBe('s3rver listening\nshutting down\n');
  });

  it('sums the requests a service answered, leaving out the pollers and counting 5xx, and the sessions running', () => {
    const metrics = [
      '# HELP http_requests_total HTTP requests by method, route and status code',
      'http_requests_total{method="GET",route="/api/v1/pricing/rates",status_code="200",service="billing-service"} 7',
      'http_requests_total{method="POST",route="/api/v1/billing/start-session",status_code="503",service="billing-service"} 2',
      'http_requests_total{method="GET",route="/metrics",status_code="200",service="billing-service"} 40',
      'http_requests_total{method="GET",route="/health",status_code="200",service="billing-service"} 90',
      'http_requests_total{method="GET",route="/health/ready",status_code="200",service="billing-service"} 3',
      'billing_sessions_running{service="billing-service"} 2',
    ].join('\n');
    expect(figuresOf(metrics)).toEqual({ requests: 9, failed: 2, sessionsRunning: 2 });
    expect(figuresOf('http_requests_total{route="/x",status_code="200"} 1')).toEqual({ requests: 1, failed: 0 });
  });

  it('says a minute in one line, and nothing of a quiet one', () => {
    const logged = { warnings: 0, errors: 0 };
    expect(summaryLine({ requests: 0, failed: 0, sessionsRunning: 0, unread: [] }, logged)).toBeUndefined();
    expect(summaryLine({ requests: 1, failed: 1, sessionsRunning: 1, unread: [] }, { warnings: 2, errors: 1 })).toBe(
      '[start] the last minute: 1 request answered (1 with 5xx), 1 session running, 2 warnings and 1 error logged',
    );
    expect(summaryLine({ requests: 0, failed: 0, sessionsRunning: 3, unread: ['billing'] }, logged)).toBe(
      '[start] the last minute: no requests answered, 3 sessions running, no warnings and no errors logged, ' +
        'no figures from billing',
    );
  });
});
