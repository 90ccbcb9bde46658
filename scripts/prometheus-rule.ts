/**
 * `pnpm rules`: writes deploy/k8s/monitoring/prometheus-rule.yaml from deploy/prometheus's rule files (the one
 * source; scripts/lib/prometheus-rule.ts). `--check` only says whether the file is current.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { PROMETHEUS_RULE_FILE, prometheusRule, RULE_FILES } from './lib/prometheus-rule.ts';

const args = process.argv.slice(2);
if (args.includes('-h') || args.includes('--help')) {
  console.log(`usage: pnpm rules [--check]

Writes ${PROMETHEUS_RULE_FILE}, the Prometheus Operator's PrometheusRule, from the rule files
${RULE_FILES.join(', ')} (edit those, then run this).
  --check   write nothing; exit 1 when the file is not what the rule files make`);
  process.exit(0);
}
const unknown = args.filter((a) => a !== '--check');
if (unknown.length > 0) {
  console.error(`pnpm rules: unknown argument ${unknown[0]} (see --help)`);
  process.exit(2);
}

const root = path.resolve(import.meta.dirname, '..');
const file = path.join(root, PROMETHEUS_RULE_FILE);
const made = prometheusRule(root);
if (args.includes('--check')) {
  const current = readFileSync(file, 'utf8') === made;
  console.log(current ? `${PROMETHEUS_RULE_FILE} is current` : `${PROMETHEUS_RULE_FILE} is stale: run pnpm rules`);
  process.exit(current ? 0 : 1);
}
writeFileSync(file, made);
console.log(`wrote ${PROMETHEUS_RULE_FILE}`);
