/**
 * The billing service's named errors. Domain code and routes throw these; the
 * common error handler turns each into the contract's problem body.
 */
import { AppError, errors } from '@gpu/common';
import type { DestinationProblem } from './domain/chain/chain.ts';

export const billingErrors = {
  ratesChanged: (providerId: string, etag: string) =>
    new AppError(
      'precondition_failed',
      'RATES_CHANGED',
      `provider ${providerId}'s rates changed since they were read (If-Match): read them again (ETag now ${etag})`,
    ),
  walletNotFound: (id: string) => errors.notFound('WALLET_NOT_FOUND', `wallet ${id} not found`),
  providerWalletNotFound: (providerId: string) =>
    errors.notFound('WALLET_NOT_FOUND', `provider ${providerId} has no wallet`),
  providerNotFound: (providerId: string) =>
    errors.notFound('PROVIDER_NOT_FOUND', `the provider registry does not know provider ${providerId}`),
  registryUnavailable: (detail: string, cause?: unknown) =>
    new AppError('unavailable', 'PROVIDER_REGISTRY_UNAVAILABLE', detail, {
      cause,
      headers: { 'retry-after': '5' },
    }),
  walletExists: (ownerType: string, ownerId: string, walletId: string) =>
    new AppError('conflict', 'WALLET_ALREADY_EXISTS', `${ownerType} ${ownerId} already has a wallet`, {
      extra: { wallet_id: walletId },
    }),
  holdNotFound: (id: string) => errors.notFound('HOLD_NOT_FOUND', `hold ${id} not found`),
  holdNotPending: (id: string, status: string) =>
    errors.conflict('HOLD_NOT_PENDING', `hold ${id} is ${status}, not pending`),
  holdExceeded: (id: string, remaining: string, asked: string) =>
    errors.conflict('HOLD_AMOUNT_EXCEEDED', `hold ${id} has ${remaining} left, ${asked} was asked for`),
  insufficientFunds: (walletId: string, available: string, needed: string) =>
    new AppError(
      'insufficient_funds',
      'INSUFFICIENT_FUNDS',
      `wallet ${walletId} has ${available} available, ${needed} is needed`,
      {
        extra: { wallet_id: walletId, available, needed },
      },
    ),
  overdraftRefused: () =>
    new AppError(
      'insufficient_funds',
      'INSUFFICIENT_FUNDS',
      'the ledger refused a transfer that would overdraw an account',
    ),
  invalidAmount: (detail: string, path = 'body.amount') => errors.validation(detail, [{ path, message: detail }]),
  payoutBelowMinimum: (amount: string, minimum: string) =>
    new AppError(
      'invalid',
      'PAYOUT_BELOW_MINIMUM',
      `a payout must be at least ${minimum} tokens, ${amount} was asked for`,
      {
        extra: { minimum_payout: minimum },
      },
    ),
  depositAlreadyCredited: (signature: string, transactionId: string, walletId: string) =>
    new AppError('conflict', 'DEPOSIT_ALREADY_CREDITED', `transaction ${signature} has already been credited`, {
      extra: { transaction_id: transactionId, wallet_id: walletId },
    }),
  depositCreditedElsewhere: (signature: string) =>
    errors.conflict('DEPOSIT_ALREADY_CREDITED', `transaction ${signature} has already been credited`),
  idempotencyKeyReused: () =>
    errors.conflict(
      'IDEMPOTENCY_KEY_REUSED',
      'this Idempotency-Key was used with different parameters; use a new key for a new request',
    ),
  idempotencyInProgress: (transactionId: string | null) =>
    new AppError(
      'conflict',
      'IDEMPOTENCY_KEY_IN_PROGRESS',
      'a request with this Idempotency-Key is still in progress',
      {
        headers: { 'retry-after': '1' },
        extra: transactionId ? { transaction_id: transactionId } : {},
      },
    ),
  chainUnavailable: (cause: unknown, extra: Record<string, unknown> = {}) =>
    new AppError('unavailable', 'SOLANA_UNAVAILABLE', 'the Solana RPC node is unavailable; try again later', {
      cause,
      headers: { 'retry-after': '5' },
      extra: { dependency: 'solana', ...extra },
    }),
  chainTransactionFailed: (detail: string, extra: Record<string, unknown>) =>
    new AppError('dependency_failed', 'SOLANA_TRANSACTION_FAILED', detail, { extra }),
  sessionNotFound: (id: string) => errors.notFound('SESSION_NOT_FOUND', `session ${id} not found`),
  sessionNotActive: (id: string, status: string) =>
    new AppError('conflict', 'SESSION_NOT_ACTIVE', `session ${id} is ${status}, not active`, {
      extra: { session_status: status },
    }),
  sessionAlreadyRunning: (jobId: string) =>
    errors.conflict('SESSION_ALREADY_RUNNING', `job ${jobId} already has a running session`),
  walletOwnerMismatch: (walletId: string, userId: string) =>
    errors.conflict('WALLET_OWNER_MISMATCH', `wallet ${walletId} is not a user wallet of ${userId}`),
  belowMinimumBalance: (walletId: string, available: string, minimum: string) =>
    new AppError(
      'insufficient_funds',
      'INSUFFICIENT_FUNDS',
      `wallet ${walletId} has ${available} available; starting a session needs at least ${minimum}`,
      { extra: { wallet_id: walletId, available, needed: minimum, minimum_balance: minimum } },
    ),
  unfitDestination: (address: string, problem: DestinationProblem, path = 'body.destination') => {
    const why = {
      program: 'is a program (or a program-owned system account), which cannot hold tokens for anyone',
      system_address: 'is the system program, which nobody owns',
      token_account: "is a token account or mint, not an owner: pay the owner's wallet address instead",
      platform_address:
        "is one of the platform's own addresses (its treasury, the treasury's token account, the token's mint or " +
        'its authority): the tokens would never leave the platform',
      burn_address: 'is a burn address: tokens sent there can never be spent by anyone',
    }[problem];
    const detail = `destination ${address} ${why}`;
    return new AppError('invalid', 'INVALID_DESTINATION', detail, {
      errors: [{ path, message: detail }],
      extra: { reason: problem },
    });
  },
  usageTimestampOutOfRange: (
    sessionId: string,
    timestamp: Date,
    reason: 'future' | 'before_start',
    window: { earliest: Date; latest: Date },
  ) => {
    const detail =
      reason === 'future'
        ? `a usage report of session ${sessionId} is dated ${timestamp.toISOString()}, after ${window.latest.toISOString()} ` +
          "(billing's clock plus the allowed clock skew): check the daemon's clock"
        : `a usage report of session ${sessionId} is dated ${timestamp.toISOString()}, before the session started ` +
          `(${window.earliest.toISOString()} with the allowed clock skew)`;
    return new AppError('invalid', 'USAGE_TIMESTAMP_OUT_OF_RANGE', detail, {
      errors: [{ path: 'body.timestamp', message: detail }],
      extra: { reason, earliest: window.earliest.toISOString(), latest: window.latest.toISOString() },
    });
  },
  addressNotProven: (walletId: string, address: string) =>
    new AppError(
      'conflict',
      'ADDRESS_NOT_PROVEN',
      `wallet ${walletId} has not proven control of ${address}: sign a challenge first ` +
        '(POST /wallet/{id}/address-challenge, then POST /wallet/{id}/address-proof)',
      { extra: { wallet_id: walletId } },
    ),
  addressProvenElsewhere: (address: string) =>
    errors.conflict('ADDRESS_PROVEN_ELSEWHERE', `${address} is already proven by another user's wallet`),
  noAddressChallenge: (walletId: string) =>
    errors.conflict(
      'NO_ADDRESS_CHALLENGE',
      `wallet ${walletId} has no pending address challenge (used or expired): ask for a new one`,
    ),
  addressProofInvalid: (address: string) =>
    new AppError(
      'unprocessable',
      'ADDRESS_PROOF_INVALID',
      `the signature is not ${address}'s signature of the challenge`,
      {
        errors: [{ path: 'body.signature', message: 'not a signature of the challenge by the wallet address' }],
      },
    ),
  rateOutOfBounds: (path: string, rate: string, limit: string) => {
    const detail = `${rate} is above the highest rate a provider may set here (${limit})`;
    return new AppError('invalid', 'RATE_OUT_OF_BOUNDS', detail, {
      errors: [{ path, message: detail }],
      extra: { limit },
    });
  },
  acceptedRateRequired: () => {
    const detail =
      'a renter starts a session at a price they accepted: send accepted_hourly_rate (POST /pricing/calculate quotes it)';
    return new AppError('invalid', 'ACCEPTED_RATE_REQUIRED', detail, {
      errors: [{ path: 'body.accepted_hourly_rate', message: detail }],
    });
  },
  gpuModelRequired: (models: string[]) => {
    const detail =
      models.length > 1
        ? `the machine has GPUs of ${models.length} models (${models.join(', ')}): name one in gpu_model`
        : 'name the GPU model to rent in gpu_model (billing prices it without a registry record of the machine)';
    return new AppError('invalid', 'GPU_MODEL_REQUIRED', detail, {
      errors: [{ path: 'body.gpu_model', message: detail }],
    });
  },
  userIdRequired: () => {
    const detail = 'a platform service or admin starts a session for a user: name the user in user_id';
    return new AppError('invalid', 'USER_ID_REQUIRED', detail, {
      errors: [{ path: 'body.user_id', message: detail }],
    });
  },
  spendCapTooLow: (cap: string, minimum: string) => {
    const detail =
      `a spend cap of ${cap} pays for less than the first billed minute, which costs ${minimum} at the session's ` +
      'rate: cap at least that (or send no cap)';
    return new AppError('invalid', 'SPEND_CAP_TOO_LOW', detail, {
      errors: [{ path: 'body.spend_cap', message: detail }],
      extra: { minimum_spend_cap: minimum },
    });
  },
  priceNotAccepted: (rate: string, accepted: string) =>
    new AppError(
      'conflict',
      'PRICE_NOT_ACCEPTED',
      `the session would cost ${rate} per hour, more than the accepted ${accepted}: accept the current price to start`,
      { extra: { total_hourly_rate: rate, accepted_hourly_rate: accepted } },
    ),
  useProviderPayout: (providerId: string) =>
    errors.conflict(
      'USE_PROVIDER_PAYOUT',
      `a provider wallet pays out its earnings through POST /provider/${providerId}/payout (with the minimum payout)`,
    ),
  destinationNotAllowed: (destination: string) => {
    const detail = `only the wallet's holder sends its money elsewhere than the wallet's own address, not to ${destination}`;
    return new AppError('forbidden', 'DESTINATION_NOT_ALLOWED', detail, {
      errors: [{ path: 'body.destination', message: detail }],
    });
  },
  autoPayoutChanged: (walletId: string) =>
    errors.conflict('AUTO_PAYOUT_CHANGED', `wallet ${walletId}'s automatic payout changed while it was being paid`),
  destinationRequired: (walletId: string) => {
    const detail = `wallet ${walletId} has no address yet: name the destination`;
    return new AppError('invalid', 'DESTINATION_REQUIRED', detail, {
      errors: [{ path: 'body.destination', message: detail }],
    });
  },
  noWalletAddress: (walletId: string) =>
    errors.conflict(
      'NO_WALLET_ADDRESS',
      `wallet ${walletId} has no Solana address (a provider wallet opened on first need)`,
    ),
  /** 409 GPU_MODEL_NOT_ON_MACHINE: the machine has no GPU of the model asked for; its models named. */
  gpuModelNotOnMachine: (providerId: string, model: string, models: string[]) =>
    new AppError(
      'conflict',
      'GPU_MODEL_NOT_ON_MACHINE',
      `machine ${providerId} has no GPU of model ${model}` +
        (models.length > 0 ? `: it has ${models.join(', ')}` : ': it reports no GPU'),
      { extra: { provider_id: providerId, gpu_models: models } },
    ),
  bidsNotAccepted: (providerId: string) =>
    new AppError(
      'conflict',
      'BIDS_NOT_ACCEPTED',
      `provider ${providerId} takes no bids: its owner set no bid floor (rent it on demand, without a bid)`,
      { errors: [{ path: 'body.bid', message: 'this machine takes no bids' }], extra: { provider_id: providerId } },
    ),
  notInterruptible: (sessionId: string) =>
    errors.conflict(
      'SESSION_NOT_INTERRUPTIBLE',
      `session ${sessionId} is on demand: it has no bid to change (only a session started with a bid has one)`,
    ),
  tooManyBidChanges: (sessionId: string, most: number) =>
    errors.conflict(
      'TOO_MANY_BID_CHANGES',
      `session ${sessionId}'s bid changed in ${most} of its minutes already, the most a session keeps: start a new ` +
        'session at the bid you want',
    ),
  bidNotAboveOutbid: (sessionId: string, bid: string, outbid: string) =>
    new AppError(
      'conflict',
      'BID_NOT_ABOVE_OUTBID',
      `session ${sessionId} took GPUs from a bid of ${outbid} per GPU-hour: its own bid stays above that, not ${bid}`,
      { errors: [{ path: 'body.bid', message: `not above ${outbid}` }], extra: { session_id: sessionId, outbid } },
    ),
  bidAboveCap: (sessionId: string, bid: string, cap: string, whose: string) =>
    new AppError(
      'conflict',
      'BID_ABOVE_CAP',
      `a bid of ${bid} per GPU-hour is more than ${whose} allows for session ${sessionId} (${cap})`,
      { errors: [{ path: 'body.bid', message: `more than ${whose} allows` }], extra: { session_id: sessionId, cap } },
    ),
  bidBelowFloor: (providerId: string, bid: string, floor: string) =>
    new AppError(
      'conflict',
      'BID_BELOW_FLOOR',
      `a bid of ${bid} per GPU-hour is below provider ${providerId}'s floor of ${floor}: bid at least the floor`,
      {
        errors: [{ path: 'body.bid', message: `below the machine's floor of ${floor}` }],
        extra: { provider_id: providerId, bid_floor: floor },
      },
    ),
  providerNotAvailable: (providerId: string, why: string, status: string) =>
    new AppError('conflict', 'PROVIDER_NOT_AVAILABLE', `provider ${providerId} ${why}`, {
      extra: { provider_id: providerId, provider_status: status },
    }),
  gpuGroupTooSmall: (providerId: string, asked: number, minimum: number) =>
    new AppError(
      'conflict',
      'GPU_GROUP_TOO_SMALL',
      `provider ${providerId} rents its GPUs in groups of at least ${minimum}, ${asked} asked`,
      { extra: { provider_id: providerId, min_gpus_per_rental: minimum } },
    ),
  reservationNotFound: (reservationId: string) =>
    errors.notFound('RESERVATION_NOT_FOUND', `reservation ${reservationId} does not exist or has expired`),
  storageUnavailable: (detail: string, cause?: unknown) =>
    new AppError('unavailable', 'STORAGE_UNAVAILABLE', detail, { cause, headers: { 'retry-after': '5' } }),
  workloadStorageUnavailable: () =>
    errors.validation(
      'this billing service has no storage service (`storage.url`): a workload may name no inputs nor output',
      [{ path: 'body.workload', message: 'inputs and output need the storage service' }],
    ),
  workloadFilesUnavailable: (sessionId: string) =>
    new AppError(
      'conflict',
      'WORKLOAD_FILES_UNAVAILABLE',
      `the workload of session ${sessionId} keeps no files in storage`,
    ),
  noCheckpoint: (sessionId: string) =>
    new AppError(
      'conflict',
      'NO_CHECKPOINT',
      `the workload of session ${sessionId} keeps no checkpoint (only a job's workload naming \`checkpoint\` does)`,
    ),
  uploadWindowClosed: (sessionId: string) =>
    new AppError(
      'conflict',
      'UPLOAD_WINDOW_CLOSED',
      `the workload of session ${sessionId} ended longer than billing.workload_upload_window ago: its files can no longer be written`,
    ),
  tooManyOpenJobs: (max: number) =>
    new AppError(
      'conflict',
      'TOO_MANY_OPEN_JOBS',
      `you have ${max} jobs not ended, the most a renter may (jobs.max_open_per_renter): wait for some to end, or ` +
        'cancel some',
      { extra: { max_open_jobs: max } },
    ),
  attemptSuperseded: (sessionId: string, attempt: number) =>
    new AppError(
      'conflict',
      'ATTEMPT_SUPERSEDED',
      `session ${sessionId} is an attempt of a job placed again since (attempt ${attempt}): the job's outputs and ` +
        "logs are the later attempt's, and this one writes none",
    ),
  invalidOutputPath: (field: string, path: string, problem: string) =>
    errors.validation(`output path ${JSON.stringify(path)}: ${problem}`, [{ path: field, message: problem }]),
  workloadNotFound: (sessionId: string) =>
    errors.notFound('WORKLOAD_NOT_FOUND', `session ${sessionId} runs no workload`),
  workloadEnded: (sessionId: string, state: string) =>
    new AppError('conflict', 'WORKLOAD_ENDED', `the workload of session ${sessionId} has ended (${state})`, {
      extra: { workload_state: state },
    }),
  reservationMismatch: (reservationId: string, why: string) =>
    errors.conflict('RESERVATION_MISMATCH', `reservation ${reservationId} ${why}`),
  /**
   * 503, not 409: the request and the wallet's funds are in order, and it is the platform that cannot pay out now,
   * until its treasury is topped up: try again later (`Retry-After`), with the same Idempotency-Key (nothing was
   * debited, the key is not taken).
   */
  reservesInsufficient: () =>
    new AppError(
      'unavailable',
      'RESERVES_INSUFFICIENT',
      "the platform's treasury does not cover this payout together with what it owes everyone else: nothing was " +
        'debited; withdrawals and payouts wait until it does',
      { headers: { 'retry-after': '60' } },
    ),
  /** 503 for the reason of RESERVES_INSUFFICIENT; lasts until an operator resumes them. */
  payoutsPaused: (since: Date, cause: 'reserve_shortfall' | 'operator') =>
    new AppError(
      'unavailable',
      'PAYOUTS_PAUSED',
      `withdrawals and payouts are paused since ${since.toISOString()} (${
        cause === 'reserve_shortfall'
          ? "a reserve check found the platform's treasury short of what it owes"
          : 'by an operator'
      }): nothing was debited; they resume when an operator resumes them`,
      { headers: { 'retry-after': '300' }, extra: { paused_since: since.toISOString(), cause } },
    ),
  reservesNotCovered: (shortfall: { gap: string }) =>
    new AppError(
      'conflict',
      'RESERVES_NOT_COVERED',
      `the treasury still does not cover what the ledger owes (${shortfall.gap} short): payouts stay paused`,
      { extra: { ...shortfall } },
    ),
  chainNotConfigured: () =>
    new AppError(
      'unavailable',
      'SOLANA_NOT_CONFIGURED',
      'the blockchain section (mint, treasury, key) is not configured',
      {
        extra: { dependency: 'solana' },
      },
    ),
};
