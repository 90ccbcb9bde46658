/**
 * Accounts: registering, the current user, roles, the initial admin (accounts.ts), and the account's epoch, which
 * ends every credential made before the address's owner proved it and chose a password (epochs.ts); whether a credential
 * a token names is still live (liveness.ts).
 */
export { currentUser, ensureInitialAdmin, register, setRoles } from './accounts.ts';
export { epochOf, type FreshStart, startAfresh } from './epochs.ts';
export {
  CREDENTIAL_ENDS,
  type CredentialRef,
  credentialsLive,
  MAX_CREDENTIALS_PER_CHECK,
  withLiveCredentials,
} from './liveness.ts';
