/**
 * Who owns each bucket, kept in the object store itself: one small JSON object per bucket,
 * `<owners_bucket>/<bucket>` = `{"owner_id": "...", "created_at": "..."}`. So the record survives restarts, is
 * shared by every instance, and moves with the store's own backups.
 *
 * A claim writes the record only when none exists (`If-None-Match: *`, atomic on S3, MinIO and other stores with
 * conditional writes), then reads it back: the record that is there decides, so of two concurrent claims exactly
 * one wins on such a store. Claims of one instance are also serialised per bucket name, which makes stores without
 * conditional writes (s3rver) safe within one instance.
 *
 * Records never change once written (no route transfers or deletes a bucket), so an owner read once is cached
 * (bounded); a missing record is not cached.
 */
import { type ObjectStore, readJson, writeJsonOnce } from './store.ts';

export interface BucketOwnerRecord {
  owner_id: string;
  created_at: string;
}

/** Owners kept in memory per instance (a record is about 100 bytes). */
const CACHE_LIMIT = 50_000;

export class BucketOwners {
  private readonly cache = new Map<string, string>();
  private readonly claiming = new Map<string, Promise<string>>();

  constructor(
    private readonly store: ObjectStore,
    /** The bucket the records live in. */
    readonly recordsBucket: string,
  ) {}

  /** The bucket's owner, or undefined when it has no record (not created through the platform). */
  async ownerOf(bucket: string): Promise<string | undefined> {
    const cached = this.cache.get(bucket);
    if (cached !== undefined) return cached;
    const record = await this.read(bucket);
    if (record) this.remember(bucket, record.owner_id);
    return record?.owner_id;
  }

  /** Every bucket with an owner record (the keys of the records' bucket); none before the first claim. */
  async ownedBuckets(): Promise<string[]> {
    const names: string[] = [];
    let token: string | undefined;
    try {
      do {
        const page = await this.store.listPage({
          bucket: this.recordsBucket,
          prefix: '',
          oneLevel: false,
          token,
          maxKeys: 1000,
        });
        // Bucket names have no `/`: other keys are not owner records (the meter's period markers).
        names.push(...page.objects.map((o) => o.key).filter((k) => !k.includes('/')));
        token = page.nextToken;
      } while (token);
    } catch (err) {
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
    }
    return names;
  }

  /** Records `ownerId` as the owner unless the bucket has one already; answers the owner that holds. */
  claim(bucket: string, ownerId: string): Promise<string> {
    const pending = this.claiming.get(bucket);
    if (pending) return pending.then(() => this.ownerOrClaim(bucket, ownerId));
    const claim = this.ownerOrClaim(bucket, ownerId).finally(() => this.claiming.delete(bucket));
    this.claiming.set(bucket, claim);
    return claim;
  }

  private async ownerOrClaim(bucket: string, ownerId: string): Promise<string> {
    const existing = await this.ownerOf(bucket);
    if (existing !== undefined) return existing;
    const record: BucketOwnerRecord = { owner_id: ownerId, created_at: new Date().toISOString() };
    // The first claim of a fresh store makes the records' bucket; another claim's record there first decides.
    await writeJsonOnce(this.store, this.recordsBucket, bucket, record);
    const held = (await this.read(bucket))?.owner_id ?? ownerId;
    this.remember(bucket, held);
    return held;
  }

  private async read(bucket: string): Promise<BucketOwnerRecord | undefined> {
    const record = (await readJson(this.store, this.recordsBucket, bucket)) as Partial<BucketOwnerRecord> | undefined;
    return typeof record?.owner_id === 'string' ? (record as BucketOwnerRecord) : undefined;
  }

  private remember(bucket: string, owner: string) {
    if (this.cache.size >= CACHE_LIMIT) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(bucket, owner);
  }
}
