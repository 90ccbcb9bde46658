/**
 * Who may do what in storage (the README's access table), applied to every operation before it reaches the store.
 *
 * - A bucket has an owner: the caller who created it through `POST /buckets/{name}` (a user, or the provider a
 *   daemon acts for). Reads, writes, lists, deletes and presigned URLs in a bucket are for its owner (and their
 *   daemons), admins and platform services (`service` clients). Someone else's bucket answers 403
 *   `BUCKET_NOT_OWNED`: bucket names are one namespace, so creating the bucket would reveal that it exists anyway.
 * - A bucket without an owner record (made outside the platform, or before access control) is for admins and
 *   services only.
 * - The default bucket is shared: each user has the folder `users/{user id}/` in it. Through the default-bucket
 *   routes (`/objects/{key}`, `/objects/list`, `/presigned-url/{key}`) a user's keys are relative to that folder;
 *   through the bucket-named routes they are full keys, and a key or listing prefix outside the caller's folder is
 *   403 `FOLDER_NOT_OWNED`. Admins and services use the default bucket's keys as they are.
 * - The API gateway and the scheduler have no business with objects (403 `ROLE_REQUIRED`): the gateway forwards a
 *   user's own token.
 * - Grants (`grants.ts`: URLs for a user's workload) are asked for by admins and services only; each of their
 *   entries is checked by these rules as the user.
 */
import { errors, isPrivileged, type Principal, type Role } from '@gpu/common';
import type { BucketOwners } from './bucket-owners.ts';
import type { Target } from './objects.ts';
import type { ObjectStore } from './store.ts';

/** Roles that may call storage routes at all. */
export const STORAGE_ROLES: readonly Role[] = ['renter', 'provider', 'admin', 'service', 'daemon'];

/**
 * Roles that may have URLs signed for another user's objects (`POST /grants`): the privileged ones (`isPrivileged`),
 * which may use any user's objects themselves.
 */
export const GRANT_ROLES: readonly Role[] = ['admin', 'service'];

export const accessErrors = {
  bucketNotOwned: (bucket: string) => errors.forbidden(`bucket ${bucket} belongs to someone else`, 'BUCKET_NOT_OWNED'),
  folderNotOwned: (folder: string) =>
    errors.forbidden(`in the default bucket, only keys under ${folder} are yours`, 'FOLDER_NOT_OWNED'),
  noOwner: () => errors.forbidden('this caller acts for no user, so it owns no storage', 'NO_OWNER'),
};

/** A target as the caller named it, and the key the store holds (they differ only in a user's default-bucket folder). */
export interface ResolvedTarget extends Target {
  /** Prefix of the store's key that the caller does not see (the user's folder on the default-bucket routes). */
  folder: string;
}

export class StorageAccess {
  constructor(
    private readonly store: ObjectStore,
    private readonly owners: BucketOwners,
    /** The shared bucket of the default-bucket routes ('' when none). */
    private readonly defaultBucket: string,
  ) {}

  /** The user whose resources the caller uses (NO_OWNER for a caller acting for nobody). */
  ownerOf(actor: Principal): string {
    if (actor.actsFor !== undefined) return actor.actsFor;
    if (isPrivileged(actor)) return actor.subject;
    throw accessErrors.noOwner();
  }

  /** The caller's folder in the default bucket. */
  folderOf(actor: Principal): string {
    return `users/${this.ownerOf(actor)}/`;
  }

  /** A default-bucket route's target: the caller's key inside its folder (as is for admins and services). */
  defaultTarget(actor: Principal, bucket: string, key: string): ResolvedTarget {
    const folder = isPrivileged(actor) ? '' : this.folderOf(actor);
    return { bucket, key: `${folder}${key}`, folder };
  }

  /** Checks that the caller may use `key` (or list under `key` as a prefix) in `bucket`. */
  async assertMayUse(actor: Principal, bucket: string, key: string): Promise<void> {
    if (isPrivileged(actor)) return;
    if (bucket === this.defaultBucket) {
      const folder = this.folderOf(actor);
      if (!key.startsWith(folder)) throw accessErrors.folderNotOwned(folder);
      return;
    }
    const owner = await this.owners.ownerOf(bucket);
    if (owner !== undefined && owner === this.ownerOf(actor)) return;
    // No record: a missing bucket answers 404 like any other missing bucket; an ownerless one is not the caller's.
    if (owner === undefined) await this.store.bucketMustExist(bucket);
    throw accessErrors.bucketNotOwned(bucket);
  }

  /**
   * Ensures the bucket exists for the caller: a new bucket becomes the caller's; one that is someone else's (or
   * ownerless, or the default bucket) is refused unless the caller is privileged.
   */
  async ensureBucket(actor: Principal, bucket: string): Promise<'created' | 'exists'> {
    const me = this.ownerOf(actor);
    if (!isPrivileged(actor)) {
      if (bucket === this.defaultBucket || bucket === this.owners.recordsBucket)
        throw accessErrors.bucketNotOwned(bucket);
      const owner = await this.owners.ownerOf(bucket);
      if (owner === undefined) {
        // A bucket that exists without a record was not made through the platform: not claimable.
        if (await this.exists(bucket)) throw accessErrors.bucketNotOwned(bucket);
        if ((await this.owners.claim(bucket, me)) !== me) throw accessErrors.bucketNotOwned(bucket);
      } else if (owner !== me) {
        throw accessErrors.bucketNotOwned(bucket);
      }
    } else if (bucket !== this.defaultBucket && bucket !== this.owners.recordsBucket) {
      // An admin's or service's new bucket is recorded as theirs; an existing record stays.
      if ((await this.owners.ownerOf(bucket)) === undefined && !(await this.exists(bucket)))
        await this.owners.claim(bucket, me);
    }
    return this.store.ensureBucket(bucket);
  }

  private async exists(bucket: string): Promise<boolean> {
    try {
      await this.store.bucketMustExist(bucket);
      return true;
    } catch (err) {
      if ((err as { code?: string }).code === 'BUCKET_NOT_FOUND') return false;
      throw err;
    }
  }
}
