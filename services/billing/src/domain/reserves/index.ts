export {
  assertPayoutsOpen,
  assertPayoutsOpenNow,
  type PayoutPause,
  pausePayouts,
  payoutPause,
} from './pause.ts';
export {
  assertReservesCover,
  checkReserves,
  type ReserveReport,
  resumePayouts,
} from './reserves.ts';
