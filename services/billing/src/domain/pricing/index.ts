export {
  bidRates,
  billableMinutes,
  costOfHours,
  costOfMinutes,
  formatRate,
  type HourlyRates,
  type MarketFactors,
  msPaidFor,
  neutralMarket,
  normalizeModel,
  quote,
} from './pricing.ts';
export {
  announcePrices,
  findProviderRates,
  ratesFor,
  type StoredProviderRates,
  setProviderRates,
} from './provider-rates.ts';
export {
  changedSegments,
  costOfSessionMinutes,
  minutesPaidFor,
  msPaidForSession,
} from './segments.ts';
