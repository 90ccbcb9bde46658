/**
 * The fleet as an operator watches it, read from the database when Prometheus scrapes: machines by status
 * (`registry_providers{status}`: idle, busy, offline, maintenance, error; each status present, 0 when no machine has
 * it). A jump in offline machines is an alert of deploy/prometheus/alerts.yml. Every instance reads the same table,
 * so rules and panels take the `max` over instances, never the sum. The read is bounded (common's boundedRead).
 */

import {
  boundedRead,
  countReadFailures,
  type Database,
  type GroupCommitStats,
  type Logger,
  metricReadFailed,
} from '@gpu/common';
import { sql } from 'kysely';
import { Counter, Gauge } from 'prom-client';
import type { RegistryDB } from '../db/schema.ts';
import { PROVIDER_STATUSES } from '../domain/provider.ts';

export function fleetMetric(database: Database<RegistryDB>, logger: Logger): Gauge<'status'> {
  countReadFailures('registry_providers');
  return new Gauge({
    name: 'registry_providers',
    help: 'registered machines by status',
    labelNames: ['status'] as const,
    registers: [],
    async collect() {
      try {
        const { rows } = await boundedRead(database.db, (trx) =>
          sql<{ status: string; n: string }>`SELECT status, count(*)::text AS n FROM providers GROUP BY status`.execute(
            trx,
          ),
        );
        this.reset();
        // Every status, 0 where no machine has it: a rule comparing with 15 minutes ago needs the series then.
        for (const status of PROVIDER_STATUSES) this.set({ status }, 0);
        for (const row of rows) this.set({ status: row.status }, Number(row.n));
      } catch (err) {
        metricReadFailed(logger, 'registry_providers', err);
      }
    },
  });
}

/**
 * How well heartbeats are grouped (`RegistryService`'s group commit): `registry_heartbeat_batches_total` batch
 * writes, `registry_heartbeats_grouped_total` heartbeats in them (their ratio is the mean batch: the larger, the less
 * each heartbeat costs PostgreSQL and the service), `registry_heartbeat_batches_held_total` those of them that waited
 * for a discovery or market read to end (`RegistryService.whileAsked`).
 */
export function heartbeatBatchMetrics(stats: () => GroupCommitStats): Counter[] {
  const counter = (name: string, help: string, read: (s: GroupCommitStats) => number) => {
    let reported = 0;
    return new Counter({
      name,
      help,
      registers: [],
      collect() {
        const now = read(stats());
        this.inc(now - reported);
        reported = now;
      },
    });
  };
  return [
    counter('registry_heartbeat_batches_total', 'batch writes of heartbeats (group commit)', (s) => s.batches),
    counter('registry_heartbeats_grouped_total', 'heartbeats written in those batches', (s) => s.items),
    counter(
      'registry_heartbeat_batches_held_total',
      'heartbeat batches that waited for a discovery or market read to end',
      (s) => s.held,
    ),
  ];
}
