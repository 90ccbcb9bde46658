/** The public view of a user, as every endpoint returns it. */
import type { UserRole as Role } from '@gpu/common';
import type { UserRow } from '../db/user-repository.ts';

export interface UserView {
  id: string;
  email: string;
  roles: Role[];
  created_at: string;
  updated_at: string;
}

export function toUserView(row: UserRow): UserView {
  return {
    id: row.id,
    email: row.email,
    roles: [...row.roles].sort(),
    created_at: new Date(row.created_at).toISOString(),
    updated_at: new Date(row.updated_at).toISOString(),
  };
}

/** Roles without duplicates, in a stable order. */
export function uniqueRoles(roles: Role[]): Role[] {
  return [...new Set(roles)].sort();
}
