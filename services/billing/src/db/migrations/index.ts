/** The billing service's migrations, in order; `scale` is the token's decimals (see 0001). */

import type { Migration } from 'kysely';
import { ledgerMigration } from './0001-ledger.ts';
import { sessionsMigration } from './0002-sessions.ts';
import { ownershipMigration } from './0003-ownership.ts';
import { addressProofMigration } from './0004-address-proof.ts';
import { providerWalletOnFirstNeedMigration } from './0005-provider-wallet-on-first-need.ts';
import { machineReservationMigration } from './0006-machine-reservation.ts';
import { autoPayoutMigration } from './0007-auto-payout.ts';
import { sessionFillfactorMigration } from './0008-session-fillfactor.ts';
import { ledgerPostGroupsMigration } from './0009-ledger-post-groups.ts';
import { autoPayoutFailureMigration } from './0010-auto-payout-failure.ts';
import { spendCapsMigration } from './0011-spend-caps.ts';
import { storageChargesMigration } from './0012-storage-charges.ts';
import { gpuLeasesMigration } from './0013-gpu-leases.ts';
import { capDeadlineSessionEventsMigration } from './0014-cap-deadline-session-events.ts';
import { ratesAnnouncedMigration } from './0015-rates-announced.ts';
import { workloadsMigration } from './0016-workloads.ts';
import { workloadOutputsMigration } from './0017-workload-outputs.ts';
import { auditTrailMigration } from './0018-audit-trail.ts';
import { outboxTraceContextMigration } from './0019-outbox-trace-context.ts';
import { usageRetentionMigration } from './0020-usage-retention.ts';
import { payoutPauseMigration } from './0021-payout-pause.ts';
import { auditChainMigration } from './0022-audit-chain.ts';
import { sessionDaemonClientMigration } from './0023-session-daemon-client.ts';
import { workloadRefusedOutputsMigration } from './0024-workload-refused-outputs.ts';
import { sessionTraceContextMigration } from './0025-session-trace-context.ts';
import { reachLinksMigration } from './0026-reach-links.ts';
import { reachUsageMigration } from './0027-reach-usage.ts';
import { jobsMigration } from './0028-jobs.ts';
import { jobCheckpointsMigration } from './0029-job-checkpoints.ts';
import { leaseVersionsMigration } from './0030-lease-versions.ts';
import { portGrantsMigration } from './0031-port-grants.ts';
import { finalCheckpointWaitMigration } from './0032-final-checkpoint-wait.ts';
import { bidsMigration } from './0033-bids.ts';
import { bidChangesMigration } from './0034-bid-changes.ts';
import { usageRecordSessionCheckMigration } from './0035-usage-record-session-check.ts';
import { usageRecordKeyMigration } from './0036-usage-record-key.ts';
import { rateLimitsMigration } from './0037-rate-limits.ts';
import { finalCheckpointSaidMigration } from './0038-final-checkpoint-said.ts';
import { runningJobPerRenterMigration } from './0039-running-job-per-renter.ts';
import { jobRequestHashMigration } from './0040-job-request-hash.ts';
import { sessionOutbidMigration } from './0041-session-outbid.ts';
import { openJobsByRenterMigration } from './0042-open-jobs-by-renter.ts';
import { portGrantsBySessionMigration } from './0043-port-grants-by-session.ts';
import { auditRequestedMigration } from './0044-audit-requested.ts';
import { withdrawalsByWalletMigration } from './0045-withdrawals-by-wallet.ts';
import { dropRateLimitsMigration } from './0046-drop-rate-limits.ts';

export function billingMigrations(scale: number): Record<string, Migration> {
  return {
    '0001-ledger': ledgerMigration(scale),
    '0002-sessions': sessionsMigration(scale),
    '0003-ownership': ownershipMigration,
    '0004-address-proof': addressProofMigration,
    '0005-provider-wallet-on-first-need': providerWalletOnFirstNeedMigration,
    '0006-machine-reservation': machineReservationMigration,
    '0007-auto-payout': autoPayoutMigration,
    '0008-session-fillfactor': sessionFillfactorMigration,
    '0009-ledger-post-groups': ledgerPostGroupsMigration(scale),
    '0010-auto-payout-failure': autoPayoutFailureMigration,
    '0011-spend-caps': spendCapsMigration(scale),
    '0012-storage-charges': storageChargesMigration(scale),
    '0013-gpu-leases': gpuLeasesMigration,
    '0014-cap-deadline-session-events': capDeadlineSessionEventsMigration,
    '0015-rates-announced': ratesAnnouncedMigration,
    '0016-workloads': workloadsMigration,
    '0017-workload-outputs': workloadOutputsMigration,
    '0018-audit-trail': auditTrailMigration,
    '0019-outbox-trace-context': outboxTraceContextMigration,
    '0020-usage-retention': usageRetentionMigration,
    '0021-payout-pause': payoutPauseMigration,
    '0022-audit-chain': auditChainMigration,
    '0023-session-daemon-client': sessionDaemonClientMigration,
    '0024-workload-refused-outputs': workloadRefusedOutputsMigration,
    '0025-session-trace-context': sessionTraceContextMigration,
    '0026-reach-links': reachLinksMigration,
    '0027-reach-usage': reachUsageMigration,
    '0028-jobs': jobsMigration(scale),
    '0029-job-checkpoints': jobCheckpointsMigration,
    '0030-lease-versions': leaseVersionsMigration,
    '0031-port-grants': portGrantsMigration,
    '0032-final-checkpoint-wait': finalCheckpointWaitMigration,
    '0033-bids': bidsMigration,
    '0034-bid-changes': bidChangesMigration,
    '0035-usage-record-session-check': usageRecordSessionCheckMigration,
    '0036-usage-record-key': usageRecordKeyMigration,
    '0037-rate-limits': rateLimitsMigration,
    '0038-final-checkpoint-said': finalCheckpointSaidMigration,
    '0039-running-job-per-renter': runningJobPerRenterMigration,
    '0040-job-request-hash': jobRequestHashMigration,
    '0041-session-outbid': sessionOutbidMigration,
    '0042-open-jobs-by-renter': openJobsByRenterMigration,
    '0043-port-grants-by-session': portGrantsBySessionMigration,
    '0044-audit-requested': auditRequestedMigration,
    '0045-withdrawals-by-wallet': withdrawalsByWalletMigration,
    '0046-drop-rate-limits': dropRateLimitsMigration,
  };
}
