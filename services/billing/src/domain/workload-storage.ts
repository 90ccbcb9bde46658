/**
 * The storage service as billing uses it for workloads (workloads/files.ts): presigned URLs of exactly the objects a
 * session's workload reads and writes, for its renter, each checked by storage as that renter (the adapter:
 * `adapters/storage-grants.ts`).
 */

/** An object in a user's storage: a key of their folder of the default bucket, or a key of a named bucket. */
export interface ObjectRef {
  bucket?: string;
  key: string;
}

/** A presigned URL of one object. */
export interface GrantedObject {
  /** The bucket the store holds it in (the default bucket's name for keys of the user's folder). */
  bucket: string;
  /** The key as asked for. */
  key: string;
  url: string;
  /** Its size in bytes (read grants). */
  size?: number;
}

/** The storage service as billing uses it for workloads: presigned URLs for a user, checked as that user. */
export interface WorkloadStorage {
  /**
   * URLs to read `read` and write `write` for `userId`, valid `expirySeconds`; refused (its 403, 404 or 400 as a
   * billing error) when the user may not, or an input does not exist.
   */
  grant(
    request: { userId: string; read: ObjectRef[]; write: ObjectRef[]; expirySeconds: number },
    correlationId?: string,
  ): Promise<{ read: GrantedObject[]; write: GrantedObject[]; expiresAt: Date }>;
}
