export {
  bidRates,
  billableMinutes,
  changedSegments,
  costOfHours,
  costOfMinutes,
  costOfSessionMinutes,
  formatRate,
  type HourlyRates,
  type MarketFactors,
  minutesPaidFor,
  msPaidFor,
  msPaidForSession,
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
