/**
 * The platform's shipped rate card (docs/conventions.md, billing defaults): the base rate per GPU-hour of each model,
 * by its model key (gpu-models.ts), with `default` for any other model, and the VRAM and power components. Billing
 * prices with it unless its configuration says otherwise (`pricing.base_rates`, `vram_rate_per_gb_hour`,
 * `power_rate_per_watt_hour`); anything else that needs the platform's prices (the registry's benchmark fleet) reads
 * them here, so no copy of the table can drift from billing's.
 */

/** Tokens per GPU-hour, by model key; `default` for a model the table does not name. */
export const DEFAULT_BASE_RATES: Readonly<Record<string, string>> = Object.freeze({
  'nvidia-geforce-rtx-4090': '0.50',
  'nvidia-geforce-rtx-4080': '0.40',
  'nvidia-geforce-rtx-4070': '0.30',
  'nvidia-geforce-rtx-3090': '0.45',
  'nvidia-geforce-rtx-3080': '0.35',
  'nvidia-tesla-a100': '2.00',
  'nvidia-tesla-v100': '1.50',
  'nvidia-tesla-h100': '4.00',
  'nvidia-h200': '5.00',
  'nvidia-tesla-l40': '1.80',
  'amd-radeon-rx-7900-xtx': '0.35',
  'amd-instinct-mi250x': '1.75',
  default: '0.25',
});

/** Tokens per GB of VRAM per hour. */
export const DEFAULT_VRAM_RATE_PER_GB_HOUR = '0.02';

/** Tokens per watt per hour. */
export const DEFAULT_POWER_RATE_PER_WATT_HOUR = '0.001';
