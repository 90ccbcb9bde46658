/**
 * Accounts: registering, the current user, roles, the initial admin (accounts.ts), and the account's epoch, which
 * ends every credential made before the address's owner proved it and chose a password (epochs.ts).
 */
export { currentUser, ensureInitialAdmin, register, setRoles } from './accounts.ts';
export { epochOf, startAfresh, withLiveCredentials } from './epochs.ts';
