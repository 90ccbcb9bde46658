/**
 * Converts litesvm's transaction errors into the JSON shape Solana's RPC uses
 * for `err` (`"AccountNotFound"`, `{"InstructionError":[0,{"Custom":1}]}`, ...),
 * and tells which errors mean the transaction never landed in a block.
 */
import {
  type FailedTransactionMetadata,
  InstructionErrorBorshIo,
  InstructionErrorCustom,
  TransactionErrorDuplicateInstruction,
  TransactionErrorInstructionError,
  TransactionErrorInsufficientFundsForRent,
  TransactionErrorProgramExecutionTemporarilyRestricted,
} from 'litesvm/dist/internal.js';

/** A transaction error as the RPC reports it. */
export type TxErrorJson = string | Record<string, unknown>;

// The order of litesvm's `TransactionErrorFieldless` const enum (litesvm/dist/internal.d.ts).
const TX_ERRORS = [
  'AccountInUse',
  'AccountLoadedTwice',
  'AccountNotFound',
  'ProgramAccountNotFound',
  'InsufficientFundsForFee',
  'InvalidAccountForFee',
  'AlreadyProcessed',
  'BlockhashNotFound',
  'CallChainTooDeep',
  'MissingSignatureForFee',
  'InvalidAccountIndex',
  'SignatureFailure',
  'InvalidProgramForExecution',
  'SanitizeFailure',
  'ClusterMaintenance',
  'AccountBorrowOutstanding',
  'WouldExceedMaxBlockCostLimit',
  'UnsupportedVersion',
  'InvalidWritableAccount',
  'WouldExceedMaxAccountCostLimit',
  'WouldExceedAccountDataBlockLimit',
  'TooManyAccountLocks',
  'AddressLookupTableNotFound',
  'InvalidAddressLookupTableOwner',
  'InvalidAddressLookupTableData',
  'InvalidAddressLookupTableIndex',
  'InvalidRentPayingAccount',
  'WouldExceedMaxVoteCostLimit',
  'WouldExceedAccountDataTotalLimit',
  'MaxLoadedAccountsDataSizeExceeded',
  'ResanitizationNeeded',
  'InvalidLoadedAccountsDataSizeLimit',
  'UnbalancedTransaction',
  'ProgramCacheHitMaxLimit',
  'CommitCancelled',
] as const;

// The order of litesvm's `InstructionErrorFieldless` const enum.
const IX_ERRORS = [
  'GenericError',
  'InvalidArgument',
  'InvalidInstructionData',
  'InvalidAccountData',
  'AccountDataTooSmall',
  'InsufficientFunds',
  'IncorrectProgramId',
  'MissingRequiredSignature',
  'AccountAlreadyInitialized',
  'UninitializedAccount',
  'UnbalancedInstruction',
  'ModifiedProgramId',
  'ExternalAccountLamportSpend',
  'ExternalAccountDataModified',
  'ReadonlyLamportChange',
  'ReadonlyDataModified',
  'DuplicateAccountIndex',
  'ExecutableModified',
  'RentEpochModified',
  'NotEnoughAccountKeys',
  'AccountDataSizeChanged',
  'AccountNotExecutable',
  'AccountBorrowFailed',
  'AccountBorrowOutstanding',
  'DuplicateAccountOutOfSync',
  'InvalidError',
  'ExecutableDataModified',
  'ExecutableLamportChange',
  'ExecutableAccountNotRentExempt',
  'UnsupportedProgramId',
  'CallDepth',
  'MissingAccount',
  'ReentrancyNotAllowed',
  'MaxSeedLengthExceeded',
  'InvalidSeeds',
  'InvalidRealloc',
  'ComputationalBudgetExceeded',
  'PrivilegeEscalation',
  'ProgramEnvironmentSetupFailure',
  'ProgramFailedToComplete',
  'ProgramFailedToCompile',
  'Immutable',
  'IncorrectAuthority',
  'AccountNotRentExempt',
  'InvalidAccountOwner',
  'ArithmeticOverflow',
  'UnsupportedSysvar',
  'IllegalOwner',
  'MaxAccountsDataAllocationsExceeded',
  'MaxAccountsExceeded',
  'MaxInstructionTraceLengthExceeded',
  'BuiltinProgramsMustConsumeComputeUnits',
  'BorshIoError',
] as const;

/**
 * Errors after which a real validator still puts the transaction in a block
 * (fee charged, status `err`). Every other error drops the transaction: it
 * never gets a signature status.
 */
const LANDED_FIELDLESS = new Set([
  'ProgramAccountNotFound',
  'InvalidProgramForExecution',
  'MaxLoadedAccountsDataSizeExceeded',
  'InvalidLoadedAccountsDataSizeLimit',
  'UnbalancedTransaction',
  'InvalidRentPayingAccount',
]);

function instructionError(e: ReturnType<TransactionErrorInstructionError['err']>): TxErrorJson {
  if (e instanceof InstructionErrorCustom) return { Custom: e.code };
  if (e instanceof InstructionErrorBorshIo) return { BorshIoError: e.msg };
  return IX_ERRORS[e as number] ?? `InstructionError${String(e)}`;
}

/** The RPC JSON form of a failed transaction's error. */
export function txErrorJson(failed: FailedTransactionMetadata): TxErrorJson {
  const e = failed.err();
  if (typeof e === 'number') return TX_ERRORS[e] ?? `TransactionError${e}`;
  if (e instanceof TransactionErrorInstructionError) return { InstructionError: [e.index, instructionError(e.err())] };
  if (e instanceof TransactionErrorDuplicateInstruction) return { DuplicateInstruction: e.index };
  if (e instanceof TransactionErrorInsufficientFundsForRent) {
    return { InsufficientFundsForRent: { account_index: e.accountIndex } };
  }
  if (e instanceof TransactionErrorProgramExecutionTemporarilyRestricted) {
    return { ProgramExecutionTemporarilyRestricted: { account_index: e.accountIndex } };
  }
  return String(e);
}

/** Whether a real validator would record this failed transaction in a block (and charge its fee). */
export function landsOnChain(err: TxErrorJson): boolean {
  return typeof err !== 'string' || LANDED_FIELDLESS.has(err);
}

/** A human-readable line for an error, like the validator's preflight messages. */
export function describeTxError(err: TxErrorJson): string {
  if (typeof err === 'string') return err;
  const ix = (err as { InstructionError?: [number, unknown] }).InstructionError;
  if (ix) {
    const [index, detail] = ix;
    const what =
      typeof detail === 'string'
        ? detail
        : (detail as { Custom?: number }).Custom !== undefined
          ? `custom program error: 0x${(detail as { Custom: number }).Custom.toString(16)}`
          : JSON.stringify(detail);
    return `Error processing Instruction ${index}: ${what}`;
  }
  return JSON.stringify(err);
}
