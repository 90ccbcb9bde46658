/**
 * The fleet as an operator watches it, read from the database when Prometheus scrapes: machines by status
 * (`registry_providers{status}`: idle, busy, offline, maintenance, error). A jump in offline machines is an alert of
 * deploy/prometheus/alerts.yml.
 */

import type { Database, Logger } from '@gpu/common';
import { sql } from 'kysely';
import { Gauge } from 'prom-client';
import type { RegistryDB } from '../db/schema.ts';

export function fleetMetric(database: Database<RegistryDB>, logger: Logger): Gauge<'status'> {
  return new Gauge({
    name: 'registry_providers',
    help: 'registered machines by status',
    labelNames: ['status'] as const,
    registers: [],
    async collect() {
      try {
        const { rows } = await sql<{ status: string; n: string }>`
          SELECT status, count(*)::text AS n FROM providers GROUP BY status`.execute(database.db);
        this.reset();
        for (const row of rows) this.set({ status: row.status }, Number(row.n));
      } catch (err) {
        logger.warn({ err: (err as Error).message, metric: 'registry_providers' }, 'reading a metric failed');
      }
    },
  });
}
