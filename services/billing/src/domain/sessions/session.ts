/** Rental sessions: what "running" means, their frozen rates, reading one. */

import type { Kysely, Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { findSession, type SessionRow } from '../../db/session-repository.ts';
import { billingErrors } from '../../errors.ts';
import { Dec } from '../ledger/index.ts';
import type { HourlyRates } from '../pricing/index.ts';

export type { BillingRecordRow } from '../../db/billing-record-repository.ts';
export type { SessionEventRow } from '../../db/session-event-repository.ts';
export type { SessionRow } from '../../db/session-repository.ts';

/** The statuses of a running session: billed by the biller, accepting usage updates, endable. */
export const RUNNING_STATUSES = ['active', 'grace_period'] as const satisfies readonly SessionRow['status'][];

/** Whether a session is still running (billed, usage accepted). */
export const isRunning = (s: { status: string }) => (RUNNING_STATUSES as readonly string[]).includes(s.status);

/**
 * How a session ends: `completed` (at `at` when it ended before now), or `terminated` with its reason; with
 * `startedMinutesAtMost`, billed no more than that many of its started minutes (a workload that never ran).
 */
export type EndKind = { startedMinutesAtMost?: number } & (
  | {
      status: 'completed';
      reason?: string;
      /** When it ended, if before now (its workload's reported end); billed to its last started minute by then. */
      at?: Date;
    }
  | {
      status: 'terminated';
      reason: string;
      /**
       * The minutes delivered, when the caller knows them (a provider that went offline: provider-offline.ts): billed
       * exactly, even below the minutes billed so far (those were only held, never captured).
       */
      deliveredMinutes?: number;
    }
);

/** The frozen rates of a session. */
export function sessionRates(s: SessionRow): HourlyRates {
  return {
    gpuModel: s.gpu_model,
    rateKey: s.rate_key,
    rateSource: s.rate_source,
    baseRatePerGpu: new Dec(s.base_rate_per_gpu),
    baseHourlyRate: new Dec(s.base_hourly_rate),
    vramHourlyRate: new Dec(s.vram_hourly_rate),
    powerHourlyRate: new Dec(s.power_hourly_rate),
    demandMultiplier: new Dec(s.demand_multiplier),
    supplyFactor: new Dec(s.supply_factor),
    totalHourlyRate: new Dec(s.total_hourly_rate),
    platformFeePercent: new Dec(s.platform_fee_percent),
  };
}

/** Reads a session (SESSION_NOT_FOUND when there is none), optionally locking its row. */
export async function loadSession(
  db: Kysely<BillingDB> | Transaction<BillingDB>,
  id: string,
  lock = false,
): Promise<SessionRow> {
  const row = await findSession(db, id, lock);
  if (!row) throw billingErrors.sessionNotFound(id);
  return row;
}
