/** The auth service's migrations, in order; run by `migrateToLatest` from @gpu/common. */
import type { Migration } from 'kysely';
import * as initial from './20250101000000_initial.ts';
import * as rateLimits from './20250201000000_rate_limits.ts';
import * as clients from './20261101000000_clients.ts';
import * as trustedDevices from './20261101000001_trusted_devices.ts';
import * as clientNamePerOwner from './20261201000000_client_name_per_owner.ts';
import * as apiKeys from './20261202000000_api_keys.ts';
import * as signInOrigin from './20261203000000_sign_in_origin.ts';
import * as emailTokens from './20261204000000_email_tokens.ts';
import * as auditTrail from './20261205000000_audit_trail.ts';
import * as auditChain from './20261206000000_audit_chain.ts';
import * as accountEpochs from './20261207000000_account_epochs.ts';
import * as sshKeys from './20261208000000_ssh_keys.ts';
import * as slidingRateLimits from './20261209000000_sliding_rate_limits.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_initial': initial,
  '20250201000000_rate_limits': rateLimits,
  '20261101000000_clients': clients,
  '20261101000001_trusted_devices': trustedDevices,
  '20261201000000_client_name_per_owner': clientNamePerOwner,
  '20261202000000_api_keys': apiKeys,
  '20261203000000_sign_in_origin': signInOrigin,
  '20261204000000_email_tokens': emailTokens,
  '20261205000000_audit_trail': auditTrail,
  '20261206000000_audit_chain': auditChain,
  '20261207000000_account_epochs': accountEpochs,
  '20261208000000_ssh_keys': sshKeys,
  '20261209000000_sliding_rate_limits': slidingRateLimits,
};
