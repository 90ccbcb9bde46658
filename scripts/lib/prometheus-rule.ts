/**
 * The Prometheus Operator's copy of the platform's rules (deploy/k8s/monitoring/prometheus-rule.yaml), made from the
 * one source, deploy/prometheus/*.yml (what docker-compose's Prometheus loads): a `PrometheusRule` whose groups are
 * those files' groups, in order, with their comments. `pnpm rules` writes it; tests/alert-rules.test.ts fails while
 * the file is not what this makes.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML, { type Document, isSeq, YAMLSeq } from 'yaml';

/** The rule files, as docker-compose's Prometheus loads them (deploy/prometheus/prometheus.yml's `rule_files`). */
export const RULE_FILES = ['deploy/prometheus/alerts.yml', 'deploy/prometheus/slo.yml'];

/** Where the PrometheusRule lives. */
export const PROMETHEUS_RULE_FILE = 'deploy/k8s/monitoring/prometheus-rule.yaml';

const HEADER = `The platform's alert and recording rules for the Prometheus Operator, made by \`pnpm rules\` from
${RULE_FILES.join(' and ')}: edit those, not this (tests/alert-rules.test.ts fails while
this file differs from what the script makes). Apply with \`kubectl apply -k deploy/k8s/monitoring\` where the operator
runs; its Prometheus must select this rule (ruleSelector, e.g. by the label below) and the ServiceMonitors beside it.`;

/** The PrometheusRule's text, from the rule files under `root`. */
export function prometheusRule(root: string): string {
  const groups = new YAMLSeq();
  for (const file of RULE_FILES) {
    const doc: Document = YAML.parseDocument(readFileSync(path.join(root, file), 'utf8'));
    const seq = doc.get('groups', true);
    if (!isSeq(seq)) throw new Error(`${file}: no groups`);
    groups.items.push(...seq.items);
  }
  const out = new YAML.Document({
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'gpu-platform', labels: { 'app.kubernetes.io/part-of': 'gpu-platform' } },
    spec: { groups: null },
  });
  out.setIn(['spec', 'groups'], groups);
  out.commentBefore = HEADER.split('\n')
    .map((line) => ` ${line}`)
    .join('\n');
  return out.toString({ lineWidth: 0 });
}
