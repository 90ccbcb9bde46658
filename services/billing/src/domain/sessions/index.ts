export { changeBid } from './bids.ts';
export { endSessionsAtCap, runBillingCycle } from './biller.ts';
export { billedFrom, paidUntil, reportedStop, startClock } from './clock.ts';
export {
  billingHistory,
  type CurrentUsage,
  currentUsage,
  purgeOldSessionEvents,
  purgeOldUsageRecords,
  sessionEventList,
  sessionList,
} from './current-usage.ts';
export { BILLING_END_REASONS, endSession, finishSession, type SessionEnd } from './end.ts';
export {
  checkRunningProviders,
  endSessionsOfStoppedProvider,
  followDaemonBinding,
  REMOVED,
} from './provider-offline.ts';
export {
  type BillingRecordRow,
  isRunning,
  loadSession,
  RUNNING_STATUSES,
  type SessionEventRow,
  type SessionRow,
  sessionRates,
} from './session.ts';
export { renterOf, type SessionStart, type StartSessionInput, startSession } from './start.ts';
export {
  MAX_REPORTS_PER_BATCH,
  toUsageUpdate,
  type UsageMessage,
  type UsageRecord,
  type UsageReportsRequest,
  type UsageResult,
  usageMessageSchema,
  usageReportsRequestSchema,
} from './usage-message.ts';
export { applyUsageReport, applyUsageUpdate } from './usage-updates.ts';
