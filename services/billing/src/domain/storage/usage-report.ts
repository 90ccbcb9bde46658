/**
 * A storage usage report as it arrives, over HTTP (`POST /billing/storage-usage`) or NATS (the storage usage
 * consumer): one schema for both, so both refuse the same reports.
 */
import { zTimestamp } from '@gpu/common';
import { z } from 'zod';
import { MAX_STORAGE_PERIOD_MS, type StorageUsageReport } from './charges.ts';

export const storageUsageSchema = z
  .object({
    user_id: z.uuid().describe('the owner of the bucket (or of the folder in the shared bucket)'),
    period_start: zTimestamp(),
    period_end: zTimestamp(),
    bytes: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  })
  .refine((b) => Date.parse(b.period_end) > Date.parse(b.period_start), {
    path: ['period_end'],
    message: 'period_end must be after period_start',
  })
  .refine((b) => Date.parse(b.period_end) - Date.parse(b.period_start) <= MAX_STORAGE_PERIOD_MS, {
    path: ['period_end'],
    message: 'a period is at most 24 hours',
  });

type StorageUsageMessage = z.infer<typeof storageUsageSchema>;

/** The report a validated message makes. */
export function toStorageUsageReport(body: StorageUsageMessage): StorageUsageReport {
  return {
    // One spelling of the ID (PostgreSQL reads `uuid` in any case; the per-user lock and the caller checks compare text).
    userId: body.user_id.toLowerCase(),
    periodStart: new Date(body.period_start),
    periodEnd: new Date(body.period_end),
    bytes: body.bytes,
  };
}
