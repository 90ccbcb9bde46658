/** Kysely table types of the auth service's database. */
import type { AuditEventsTable, ClientRole, RateLimitTable, UserRole as Role, Scope } from '@gpu/common';
import type { ColumnType, Generated, JSONColumnType } from 'kysely';

type Timestamp = ColumnType<Date, Date | string, Date | string>;
/** A timestamp the database fills in by default. */
type DefaultTimestamp = ColumnType<Date, Date | string | undefined, Date | string>;

export interface UsersTable {
  id: Generated<string>;
  /** Normalised (trimmed, lower-case); unique. */
  email: string;
  /** argon2id PHC string. */
  password_hash: string;
  roles: ColumnType<Role[], Role[], Role[]>;
  created_at: DefaultTimestamp;
  updated_at: DefaultTimestamp;
  /** When the user proved they read mail at `email` (migration 20261204000000_email_tokens); null: not yet. */
  email_verified_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  /**
   * How many times the account started afresh for whoever reads its mail (migration 20261207000000_account_epochs):
   * a credential made in an earlier epoch is dead (domain/accounts/epochs.ts).
   */
  epoch: Generated<number>;
}

/** What a mailed token does. */
export type EmailTokenPurpose = 'verify_email' | 'reset_password';

/** Single-use tokens mailed to a user (migration 20261204000000_email_tokens). */
interface EmailTokensTable {
  id: Generated<string>;
  user_id: string;
  purpose: EmailTokenPurpose;
  /** SHA-256 (hex) of the token; the token itself is only in the mail. */
  token_hash: string;
  /** The address it was mailed to: it does nothing once the account's address is another. */
  email: string;
  created_at: DefaultTimestamp;
  expires_at: Timestamp;
  used_at: Timestamp | null;
}

export interface RefreshTokensTable {
  id: Generated<string>;
  /** All tokens descending from one login share a family; reuse revokes the family. */
  family_id: string;
  user_id: string;
  parent_id: string | null;
  /** SHA-256 (hex) of the opaque token; the token itself is never stored. */
  token_hash: string;
  created_at: DefaultTimestamp;
  expires_at: Timestamp;
  /** When the token was exchanged for a successor. */
  used_at: Timestamp | null;
  revoked_at: Timestamp | null;
  revoked_reason: string | null;
  /** The `User-Agent` (cut at 200 characters) and address of the caller it was issued to (migration 20261203). */
  user_agent: string | null;
  ip: string | null;
  /** The account's epoch when the family's sign-in began (migration 20261207000000): its tokens die with it. */
  epoch: Generated<number>;
}

interface SigningKeysTable {
  kid: string;
  alg: string;
  /** The public JWK (never the private key). */
  public_jwk: JSONColumnType<Record<string, unknown>>;
  created_at: DefaultTimestamp;
  /** Set when another key took over signing; the key stays published until its tokens expired. */
  retired_at: Timestamp | null;
}

/** A user's API keys (migration 20261202000000_api_keys). */
export interface ApiKeysTable {
  id: string;
  user_id: string;
  name: string;
  /** The start of the key (`gpk_` and 8 characters), shown in listings. */
  prefix: string;
  /** SHA-256 (hex) of the whole key; the key itself is never stored. */
  secret_hash: string;
  scopes: Scope[];
  expires_at: Timestamp | null;
  created_at: DefaultTimestamp;
  last_used_at: Timestamp | null;
  revoked_at: Timestamp | null;
  /** The account's epoch when the key was made (migration 20261207000000): the key dies with it. */
  epoch: Generated<number>;
}

/** A user's SSH public keys (migration 20261208000000_ssh_keys). */
export interface SshKeysTable {
  id: string;
  user_id: string;
  name: string;
  /** The key's type as OpenSSH names it (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`). */
  type: string;
  /** `SHA256:` and the unpadded base64 of the SHA-256 of the key's data, as `ssh-keygen -lf` prints it. */
  fingerprint: string;
  /** `<type> <base64 data>`: the key as an `authorized_keys` line takes it, without its comment. */
  public_key: string;
  created_at: DefaultTimestamp;
}

export interface ClientsTable {
  id: Generated<string>;
  /** Unique among active clients (`billing-service`, `gateway`, `daemon-rack-12`). */
  name: string;
  role: ClientRole;
  /** A daemon's provider owner (a user); null for other roles. */
  owner_id: string | null;
  /** SHA-256 (hex) of the secret; the secret itself is never stored. */
  secret_hash: string;
  /** The secret before the last rotation, still accepted until `previous_secret_expires_at`. */
  previous_secret_hash: string | null;
  previous_secret_expires_at: Timestamp | null;
  /** The admin or provider who created it; null for clients created at start-up. */
  created_by: string | null;
  created_at: DefaultTimestamp;
  rotated_at: Timestamp | null;
  revoked_at: Timestamp | null;
  last_used_at: Timestamp | null;
  /** A daemon's: its owner's epoch when it was made (migration 20261207000000); the client dies with it. */
  owner_epoch: Generated<number>;
}

interface TrustedDevicesTable {
  id: Generated<string>;
  user_id: string;
  /** SHA-256 (hex) of the device token the client keeps. */
  token_hash: string;
  created_at: DefaultTimestamp;
  last_used_at: DefaultTimestamp;
  expires_at: Timestamp;
  /** The account's epoch when the device was trusted (migration 20261207000000): no longer trusted after it. */
  epoch: Generated<number>;
}

export interface AuthDatabase {
  users: UsersTable;
  trusted_devices: TrustedDevicesTable;
  clients: ClientsTable;
  api_keys: ApiKeysTable;
  ssh_keys: SshKeysTable;
  email_tokens: EmailTokensTable;
  /** Security-relevant actions, append-only (migration 20261205000000_audit_trail; @gpu/common's audit-trail.ts). */
  audit_events: AuditEventsTable;
  refresh_tokens: RefreshTokensTable;
  signing_keys: SigningKeysTable;
  /** Rate-limit windows, written only by the `RateLimiter` of @gpu/common. */
  rate_limits: RateLimitTable;
}
