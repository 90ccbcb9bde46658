/**
 * The alert and recording rules (deploy/prometheus/alerts.yml and slo.yml, the one source; the Kubernetes
 * PrometheusRule is made from them by `pnpm rules`): valid for Prometheus (`promtool check rules`), passing their unit
 * tests (`promtool test rules deploy/prometheus/tests/*.test.yml`, with a firing and a quiet case for every alerting
 * rule), on the files and on the Kubernetes copy alike; every alert with a severity and a runbook page; naming only
 * metrics the services export (so a renamed metric cannot leave an alert that never fires) and reading the gauges
 * every instance exports alike (counted in the shared database) with `max`/`min`, never summing them over instances.
 * promtool is Debian's, installed by the test set-up (scripts/test-env.sh).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { PROMETHEUS_RULE_FILE, prometheusRule, RULE_FILES } from '../scripts/lib/prometheus-rule.ts';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');
const testsDir = path.join(root, 'deploy/prometheus/tests');
const TEST_FILES = readdirSync(testsDir)
  .filter((f) => f.endsWith('.test.yml'))
  .map((f) => path.join(testsDir, f));
/** Where every alert's runbook_url points: a page of docs/runbooks (docs/runbooks/README.md says how to move it). */
const RUNBOOK_BASE = 'https://github.com/gpu-platform/gpu-platform/blob/main/docs/runbooks/';
const SEVERITIES = ['critical', 'warning'];

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleGroups {
  groups: { name: string; rules: Rule[] }[];
}
interface UnitTests {
  rule_files: string[];
  tests: {
    alert_rule_test?: {
      eval_time: string;
      alertname: string;
      exp_alerts?: { exp_labels?: Record<string, string> }[];
    }[];
  }[];
}

const readYaml = <T>(file: string): T => YAML.parse(readFileSync(path.join(root, file), 'utf8')) as T;
const rules = RULE_FILES.flatMap((f) => readYaml<RuleGroups>(f).groups.flatMap((g) => g.rules));
const alerts = rules.filter((r) => r.alert !== undefined);
const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));
/** An alerting rule by its name and severity (a burn-rate alert has a page and a ticket of one name). */
const ruleId = (r: Rule) => `${r.alert} (${r.labels?.severity})`;

/**
 * Gauges each instance reads from the database its service shares (or from JetStream's shared consumers): every
 * instance exports the same value, so summing them over instances counts the fleet 3-8 times under the production HPA.
 */
const SHARED_GAUGES = [
  'registry_providers',
  'registry_outbox_backlog',
  'registry_outbox_oldest_seconds',
  'registry_consumer_pending',
  'billing_sessions_running',
  'billing_usage_lag_seconds',
  'billing_outbox_backlog',
  'billing_outbox_oldest_seconds',
  'billing_payouts_pending',
  'billing_payouts_pending_oldest_seconds',
  'billing_auto_payouts_failing',
  'billing_consumer_pending',
  'billing_reserve_ratio',
  'billing_treasury_balance_tokens',
  'billing_reserve_required_tokens',
  'billing_deposits_unclaimed_tokens',
];

/** The metric names an expression reads: identifiers before a selector or a comparison, not PromQL's own words. */
function metricsOf(expr: string): string[] {
  const words = new Set([
    'sum',
    'by',
    'rate',
    'time',
    'offset',
    'and',
    'or',
    'unless',
    'on',
    'without',
    'increase',
    'max',
    'min',
    'le',
  ]);
  const names = [
    ...expr
      .replace(/"[^"]*"/g, '""')
      .replace(/\[[^\]]*\]/g, '')
      .matchAll(/\b([a-z_][a-z0-9_:]*)\b(?!\s*\()/g),
  ].map((m) => m[1]!);
  return names
    .filter(
      (n) =>
        !words.has(n) &&
        !/^(status_code|job|status|instance|reason|consumer|route|method|metric)$/.test(n) &&
        !/^\d/.test(n),
    )
    .map((n) => n.replace(/_(bucket|count|sum)$/, ''));
}

/** Every metric name a service registers with prom-client (`name: '...'` in a file that uses prom-client). */
function exportedMetrics(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const full = path.join(dir, entry);
      if (entry === 'node_modules' || entry === 'dist' || entry === 'test') continue;
      if (statSync(full).isDirectory()) walk(full);
      else if (full.endsWith('.ts')) {
        const text = readFileSync(full, 'utf8');
        // Metrics named by the service's prefix: a consumer's lag (common's consumerPendingGauge) and the outbox's
        // backlog (common's outboxMetrics).
        for (const m of text.matchAll(/consumerPendingGauge\(\s*'([a-z]+)'/g)) names.add(`${m[1]}_consumer_pending`);
        for (const m of text.matchAll(/outboxMetrics\(\s*'([a-z]+)'/g)) {
          names.add(`${m[1]}_outbox_backlog`);
          names.add(`${m[1]}_outbox_oldest_seconds`);
        }
        if (!text.includes("from 'prom-client'")) continue;
        for (const m of text.matchAll(/(?:name:|fromDb\(|fromState\(|gauge\()\s*'([a-z_:]+)'/g)) names.add(m[1]!);
      }
    }
  };
  for (const dir of ['packages/common/src', 'services']) walk(path.join(root, dir));
  return names;
}

/** Expressions that add up a shared gauge over instances (`sum(...)`, `sum by (...) (...)` right around it). */
function summedSharedGauges(expr: string): string[] {
  return SHARED_GAUGES.filter((g) =>
    new RegExp(`sum\\s*(?:(?:by|without)\\s*\\([^)]*\\)\\s*)?\\(\\s*(?:rate\\(\\s*)?${g}\\b`).test(expr),
  );
}

/** The rule files under `dir` as `promtool test rules` runs them: the test files with `rule_files` replaced. */
function unitTestsOn(dir: string, ruleFiles: string[]): string[] {
  return TEST_FILES.map((file) => {
    const tests = YAML.parse(readFileSync(file, 'utf8')) as UnitTests;
    const copy = path.join(dir, path.basename(file));
    writeFileSync(copy, YAML.stringify({ ...tests, rule_files: ruleFiles }));
    return copy;
  });
}

describe('deploy/prometheus rule files', () => {
  it('pass promtool check rules, and a broken copy does not', async () => {
    for (const file of RULE_FILES) {
      const { stdout } = await run('promtool', ['check', 'rules', path.join(root, file)]);
      expect(stdout, file).toMatch(/SUCCESS: \d+ rules found/);
    }
    const broken = path.join(mkdtempSync(path.join(tmpdir(), 'rules-')), 'alerts.yml');
    writeFileSync(
      broken,
      readFileSync(path.join(root, RULE_FILES[0]!), 'utf8').replace(
        'min(billing_reserve_ratio) < 1',
        'min(billing_reserve_ratio) <',
      ),
    );
    await expect(run('promtool', ['check', 'rules', broken])).rejects.toMatchObject({ code: 1 });
  });

  it('pass their unit tests (promtool test rules)', { timeout: 300_000 }, async () => {
    const { stdout } = await run('promtool', ['test', 'rules', ...TEST_FILES], { cwd: testsDir });
    expect(stdout.match(/SUCCESS/g)).toHaveLength(TEST_FILES.length);
  });

  it('test each alerting rule firing and quiet, each recording rule through an alert', () => {
    const cases = TEST_FILES.flatMap((file) => {
      const tests = YAML.parse(readFileSync(file, 'utf8')) as UnitTests;
      for (const ruleFile of tests.rule_files) {
        expect(RULE_FILES, `${file}: ${ruleFile}`).toContain(
          path.relative(root, path.resolve(path.dirname(file), ruleFile)),
        );
      }
      return tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    });
    const untested = alerts.flatMap((rule) => {
      const mine = cases.filter((c) => c.alertname === rule.alert);
      const fires = mine.some((c) =>
        (c.exp_alerts ?? []).some((a) => a.exp_labels?.severity === rule.labels?.severity),
      );
      const quiet = mine.some(
        (c) => !(c.exp_alerts ?? []).some((a) => a.exp_labels?.severity === rule.labels?.severity),
      );
      return [
        ...(fires ? [] : [`${ruleId(rule)}: no firing case`]),
        ...(quiet ? [] : [`${ruleId(rule)}: no quiet case`]),
      ];
    });
    expect(untested).toEqual([]);
    expect(alerts.length).toBeGreaterThanOrEqual(16);
    // A recording rule no alert reads is tested by nothing.
    const unread = [...recorded].filter((name) => !alerts.some((a) => metricsOf(a.expr).includes(name)));
    expect(unread).toEqual([]);
  });

  it('give every alert a severity and a runbook page that says what it means, how to check and how to fix', () => {
    const pages = new Set(readdirSync(path.join(root, 'docs/runbooks')).filter((f) => f !== 'README.md'));
    const index = readFileSync(path.join(root, 'docs/runbooks/README.md'), 'utf8');
    for (const rule of alerts) {
      expect(SEVERITIES, ruleId(rule)).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, ruleId(rule)).toBeTruthy();
      const url = rule.annotations?.runbook_url ?? '';
      expect(url, ruleId(rule)).toBe(`${RUNBOOK_BASE}${rule.alert}.md`);
      const page = readFileSync(path.join(root, 'docs/runbooks', `${rule.alert}.md`), 'utf8');
      expect(page.startsWith(`# ${rule.alert}\n`), ruleId(rule)).toBe(true);
      for (const part of ['## What it means', '## How to check', '## How to fix']) {
        expect(page, `${rule.alert}.md: ${part}`).toContain(`\n${part}\n`);
      }
      expect(page, `${rule.alert}.md names the severity`).toContain(rule.labels!.severity!);
      expect(index, `docs/runbooks/README.md lists ${rule.alert}`).toContain(`(${rule.alert}.md)`);
    }
    // No page for an alert that is gone.
    expect([...pages].sort()).toEqual([...new Set(alerts.map((a) => `${a.alert}.md`))].sort());
  });

  it('name only metrics a service exports (and Prometheus its own `up`, and the recording rules theirs)', () => {
    const exported = exportedMetrics();
    const named = rules.flatMap((r) => metricsOf(r.expr).map((m) => `${r.alert ?? r.record}: ${m}`));
    expect(named.length).toBeGreaterThan(10);
    const unknown = named.filter((n) => {
      const metric = n.split(': ')[1]!;
      return metric !== 'up' && !exported.has(metric) && !recorded.has(metric);
    });
    expect(unknown).toEqual([]);
    for (const gauge of SHARED_GAUGES) expect(exported.has(gauge), gauge).toBe(true);
    // The reserve ratio the proof of reserves exports is what the money alert reads.
    expect(exported.has('billing_reserve_ratio')).toBe(true);
  });

  it('never add up over instances a gauge every instance exports alike', () => {
    const summed = rules.flatMap((r) => summedSharedGauges(r.expr).map((g) => `${r.alert ?? r.record}: ${g}`));
    expect(summed).toEqual([]);
    expect(summedSharedGauges('sum by (status) (registry_providers)')).toEqual(['registry_providers']);
    expect(summedSharedGauges('sum(max by (status) (registry_providers))')).toEqual([]);
  });
});

describe(PROMETHEUS_RULE_FILE, () => {
  it('is what `pnpm rules` makes of the rule files', () => {
    expect(readFileSync(path.join(root, PROMETHEUS_RULE_FILE), 'utf8')).toBe(prometheusRule(root));
    const rule = readYaml<{ kind: string; spec: RuleGroups }>(PROMETHEUS_RULE_FILE);
    expect(rule.kind).toBe('PrometheusRule');
    expect(rule.spec.groups).toEqual(RULE_FILES.flatMap((f) => readYaml<RuleGroups>(f).groups));
  });

  it('passes the same unit tests as the rule files', { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'prometheus-rule-'));
    const rule = readYaml<{ spec: RuleGroups }>(PROMETHEUS_RULE_FILE);
    writeFileSync(path.join(dir, 'rules.yml'), YAML.stringify(rule.spec));
    const files = unitTestsOn(dir, ['rules.yml']);
    const { stdout } = await run('promtool', ['test', 'rules', ...files], { cwd: dir });
    expect(stdout.match(/SUCCESS/g)).toHaveLength(files.length);
  });
});

describe('deploy/grafana/gpu-platform.json', () => {
  const dashboard = JSON.parse(readFileSync(path.join(root, 'deploy/grafana/gpu-platform.json'), 'utf8')) as {
    panels: { title: string; targets: { expr: string }[] }[];
  };
  const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => ({ panel: p.title, expr: t.expr })));

  it('charts only metrics a service exports or the rules record', () => {
    const exported = exportedMetrics();
    const named = exprs.flatMap((e) => metricsOf(e.expr).map((metric) => ({ panel: e.panel, metric })));
    expect(named.length).toBeGreaterThan(10);
    expect(named.filter((n) => !exported.has(n.metric) && !recorded.has(n.metric))).toEqual([]);
  });

  it('charts a gauge every instance exports alike once (max or min), never their sum', () => {
    const shared = exprs.filter((e) => metricsOf(e.expr).some((m) => SHARED_GAUGES.includes(m)));
    expect(shared.length).toBeGreaterThan(8);
    expect(shared.filter((e) => summedSharedGauges(e.expr).length > 0 || !/\b(max|min)\b/.test(e.expr))).toEqual([]);
  });
});
