/**
 * The roles each billing route admits (checked before the body is read); who may act on which wallet, session or
 * provider account is decided in the domain (domain/access.ts). The README's access table lists both.
 */
import type { Role } from '@gpu/common';

/** Wallets: their holders (users) and the privileged. */
export const WALLET_ROLES: readonly Role[] = ['renter', 'provider', 'admin', 'service'];
/** Starting a rental: users on their own wallets, and the privileged. */
export const RENTAL_ROLES: readonly Role[] = ['renter', 'provider', 'admin', 'service'];
/** Reading and ending a session, history: its renter, the provider's owner and daemon, the privileged. */
export const SESSION_ROLES: readonly Role[] = ['renter', 'provider', 'daemon', 'admin', 'service'];
/** Usage reports: the provider's daemon (or owner) and the privileged. */
export const USAGE_ROLES: readonly Role[] = ['provider', 'daemon', 'admin', 'service'];
/** Managing a provider account (payouts, rates): its owner and the privileged. */
export const PROVIDER_ROLES: readonly Role[] = ['provider', 'admin', 'service'];
/** Reading a provider's earnings: also its daemon. */
export const EARNINGS_ROLES: readonly Role[] = ['provider', 'daemon', 'admin', 'service'];
/** Reserving a machine's GPUs for a renter: the platform's scheduler client (its own role), services and admins. */
export const RESERVATION_ROLES: readonly Role[] = ['admin', 'service', 'scheduler'];
/** Storage usage reports: the storage service (a platform service) and admins. */
export const STORAGE_REPORT_ROLES: readonly Role[] = ['admin', 'service'];
/** Reading storage charges: users (their own) and the privileged. */
export const STORAGE_READ_ROLES: readonly Role[] = ['renter', 'provider', 'admin', 'service'];
