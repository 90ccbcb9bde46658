/**
 * The roles a token can carry. Users hold `renter`, `provider` and `admin`;
 * machine clients (OAuth 2.0 client-credentials grant at the auth service)
 * hold exactly one of the client roles:
 * - `service`: a platform service calling another one (trusted like an admin inside the platform);
 * - `gateway`: the API gateway (reads discovery; user requests carry the user's own token);
 * - `scheduler`: the scheduler (reads discovery);
 * - `daemon`: a provider daemon, acting for the provider owner named in its token (`owner_id`).
 */
export const USER_ROLES = ['provider', 'renter', 'admin'] as const;
export const CLIENT_ROLES = ['service', 'gateway', 'scheduler', 'daemon'] as const;
export const ROLES = [...USER_ROLES, ...CLIENT_ROLES] as const;

export type UserRole = (typeof USER_ROLES)[number];
export type ClientRole = (typeof CLIENT_ROLES)[number];
export type Role = (typeof ROLES)[number];

export const isClientRole = (role: string): role is ClientRole => (CLIENT_ROLES as readonly string[]).includes(role);
