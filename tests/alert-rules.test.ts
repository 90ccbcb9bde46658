/**
 * The alert rules (deploy/prometheus/alerts.yml): valid for Prometheus (`promtool check rules`, Debian's promtool,
 * installed by the test set-up), and naming only metrics the services export, so that a renamed metric cannot leave an
 * alert that never fires.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');
const rulesFile = path.join(root, 'deploy/prometheus/alerts.yml');

interface Rules {
  groups: { name: string; rules: { alert: string; expr: string }[] }[];
}

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
    'le',
  ]);
  const names = [...expr.replace(/"[^"]*"/g, '""').matchAll(/\b([a-z_][a-z0-9_]*)\b(?!\s*\()/g)].map((m) => m[1]!);
  return names
    .filter((n) => !words.has(n) && !/^(status_code|job|status|instance|reason|consumer)$/.test(n) && !/^\d/.test(n))
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
        // A consumer's lag gauge, named by the service's prefix (common's consumerPendingGauge).
        for (const m of text.matchAll(/consumerPendingGauge\(\s*'([a-z]+)'/g)) names.add(`${m[1]}_consumer_pending`);
        if (!text.includes("from 'prom-client'")) continue;
        for (const m of text.matchAll(/(?:name:|fromDb\(|gauge\()\s*'([a-z_:]+)'/g)) names.add(m[1]!);
      }
    }
  };
  for (const dir of ['packages/common/src', 'services']) walk(path.join(root, dir));
  return names;
}

describe('deploy/prometheus/alerts.yml', () => {
  it('passes promtool check rules, and a broken copy does not', async () => {
    const { stdout } = await run('promtool', ['check', 'rules', rulesFile]);
    expect(stdout).toMatch(/SUCCESS: \d+ rules found/);
    const broken = path.join(mkdtempSync(path.join(tmpdir(), 'rules-')), 'alerts.yml');
    copyFileSync(rulesFile, broken);
    writeFileSync(broken, readFileSync(broken, 'utf8').replace('billing_reserve_ratio < 1', 'billing_reserve_ratio <'));
    await expect(run('promtool', ['check', 'rules', broken])).rejects.toMatchObject({ code: 1 });
  });

  it('names only metrics a service exports (and Prometheus its own `up`)', () => {
    const rules = YAML.parse(readFileSync(rulesFile, 'utf8')) as Rules;
    const exported = exportedMetrics();
    const named = rules.groups.flatMap((g) => g.rules.flatMap((r) => metricsOf(r.expr).map((m) => `${r.alert}: ${m}`)));
    expect(named.length).toBeGreaterThan(10);
    const unknown = named.filter((n) => {
      const metric = n.split(': ')[1]!;
      return metric !== 'up' && !exported.has(metric);
    });
    expect(unknown).toEqual([]);
    // The reserve ratio the proof of reserves exports is what the money alert reads.
    expect(exported.has('billing_reserve_ratio')).toBe(true);
  });

  it("is the Kubernetes PrometheusRule's, group for group", () => {
    const rule = YAML.parse(readFileSync(path.join(root, 'deploy/k8s/monitoring/prometheus-rule.yaml'), 'utf8'));
    expect(rule.spec).toEqual(YAML.parse(readFileSync(rulesFile, 'utf8')));
  });
});

describe('deploy/grafana/gpu-platform.json', () => {
  it('charts only metrics a service exports', () => {
    const dashboard = JSON.parse(readFileSync(path.join(root, 'deploy/grafana/gpu-platform.json'), 'utf8')) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const exported = exportedMetrics();
    const named = dashboard.panels.flatMap((p) =>
      p.targets.flatMap((t) => metricsOf(t.expr).map((metric) => ({ panel: p.title, metric }))),
    );
    expect(named.length).toBeGreaterThan(10);
    expect(named.filter((n) => !exported.has(n.metric))).toEqual([]);
  });
});
