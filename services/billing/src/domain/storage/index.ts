/** Stored bytes, billed: the storage service's reports charged per period (charges.ts). */
export { chargeStorage, MAX_STORAGE_PERIOD_MS, storageCharges } from './charges.ts';
