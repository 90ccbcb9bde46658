/** Stored bytes, billed: the storage service's reports charged per period (charges.ts). */
export { chargeStorage, type StorageChargeRow, storageCharges } from './charges.ts';
export { storageUsageSchema, toStorageUsageReport } from './usage-report.ts';
