/**
 * Resumable uploads: an object sent as numbered parts over as many requests as the client needs (and over failures:
 * a client that lost its connection asks which parts arrived and sends only the rest), joined into the object when
 * the client completes the upload. The store's own multipart upload holds the parts (S3, MinIO, the dev server);
 * the service keeps one small record per upload in the records bucket, `.uploads/<owner>/<upload id>`, which says
 * whose upload it is, where the object goes and when it was started. So:
 *
 * - an upload is its owner's (the user a caller acts for, as for buckets): another user's upload ID is 404, as one
 *   that never existed; its target was checked by the access rules when it was made;
 * - a user has at most `MAX_OPEN_UPLOADS` unfinished uploads (409 TOO_MANY_UPLOADS), each at most `max_upload_size`
 *   in all (a part that would pass it is 413 before a byte of it is read), so unfinished parts, which are not
 *   billed as stored bytes until they are an object, stay bounded. The starts of one user take turns (`StartLock`:
 *   on one instance a queue, across instances the storage database's advisory lock), so counting the open uploads
 *   and writing the new one is one step: starts sent at once admit exactly the bound. Parts sent at once are checked
 *   again once stored, and the ones past the size bound give their upload up;
 * - an upload not completed within `upload_expiry` of its start is aborted by the sweeper (every instance sweeps;
 *   aborting twice is harmless) and its parts are freed; until then it answers 404 as well;
 * - the store's rules for parts apply and are checked before the store sees them: numbers 1-10000, every part but
 *   the last at least 5 MiB, a part sent again replaces the one before.
 */
import { randomUUID } from 'node:crypto';
import { errors, type Logger, sameEntityTag } from '@gpu/common';
import { storageErrors } from '../../errors.ts';
import type { ResolvedTarget } from '../access.ts';
import {
  type ObjectEntry,
  type ObjectStore,
  type PartInfo,
  type PartRequest,
  readJson,
  type StoredPart,
  type StorePage,
  writeJsonOnce,
} from '../store.ts';

/** S3's smallest part but the last. */
export const MIN_PART_SIZE = 5 * 1024 * 1024;
/** S3's most parts of one upload. */
export const MAX_PARTS = 10_000;
/** S3's largest part (a copied part's most bytes too). */
const MAX_PART_SIZE = 5 * 1024 * 1024 * 1024;
/** Unfinished uploads one owner may have at once. */
export const MAX_OPEN_UPLOADS = 10;

const RECORDS = '.uploads/';

/**
 * Serialises the starts of one owner's uploads across the instances sharing the service's database
 * (`db/upload-start-lock.ts`), so that counting the owner's open uploads and writing a new one is one step.
 */
export interface StartLock {
  /** Runs `fn` while no other start of `owner`'s runs on another instance. */
  hold<T>(owner: string, fn: () => Promise<T>): Promise<T>;
}

/** What the service keeps of an upload (the store keeps its parts). */
export interface UploadRecord {
  upload_id: string;
  /** The user it belongs to. */
  owner: string;
  bucket: string;
  /** The store's key. */
  key: string;
  /** Prefix of the key that the owner does not see (their folder, on the default bucket's routes). */
  folder: string;
  /** Whether the caller named the bucket (else: the default bucket). */
  named_bucket: boolean;
  content_type: string;
  store_upload_id: string;
  created_at: string;
}

export interface UploadSettings {
  /** `max_upload_size`: the most bytes of all parts together. */
  maxSize: number;
  /** `upload_expiry` in milliseconds. */
  expiryMs: number;
}

/** A part to store: the caller's part number, its body and its declared length. */
export type IncomingPart = Omit<PartRequest, 'bucket' | 'key' | 'uploadId'>;

export class Uploads {
  /** Each owner's start under way on this instance, which the next one waits for. */
  private readonly starting = new Map<string, Promise<unknown>>();

  constructor(
    private readonly store: ObjectStore,
    /** The bucket of the records (the bucket-owner records' bucket). */
    private readonly recordsBucket: string,
    private readonly settings: UploadSettings,
    private readonly startLock: StartLock,
    private readonly logger?: Logger,
  ) {}

  /** A page of records under `prefix` (none before the records bucket exists). */
  private async records(prefix: string, maxKeys: number, token?: string): Promise<StorePage> {
    try {
      return await this.store.listPage({ bucket: this.recordsBucket, prefix, oneLevel: false, token, maxKeys });
    } catch (err) {
      if ((err as { code?: string }).code === 'BUCKET_NOT_FOUND') return { folders: [], objects: [] };
      throw err;
    }
  }

  private recordKey(owner: string, uploadId: string): string {
    return `${RECORDS}${owner}/${uploadId}`;
  }

  expiresAt(record: UploadRecord): Date {
    return new Date(Date.parse(record.created_at) + this.settings.expiryMs);
  }

  /** Whether a listed record is of an upload still open at `now` (a record's time in the listing is its start). */
  private isOpen(entry: ObjectEntry, now: number): boolean {
    return (entry.lastModified?.getTime() ?? now) + this.settings.expiryMs > now;
  }

  /** Every owner's records, as the store lists them, page by page. */
  private async *everyRecord(): AsyncGenerator<ObjectEntry> {
    let token: string | undefined;
    do {
      const page = await this.records(RECORDS, 1000, token);
      yield* page.objects;
      token = page.nextToken;
    } while (token);
  }

  /** The keys of the owner's records that have not expired. */
  private async openKeys(owner: string): Promise<string[]> {
    const now = Date.now();
    const page = await this.records(`${RECORDS}${owner}/`, 1000);
    return page.objects.filter((o) => this.isOpen(o, now)).map((o) => o.key);
  }

  /**
   * Starts an upload of the owner to the target (already checked by the access rules); 409 TOO_MANY_UPLOADS when the
   * owner has the most open uploads there may be. The owner's starts take turns: here, one after the other on this
   * instance (so that one request at a time of an owner waits for the database's lock, not one per request), and
   * under the start lock across instances, so the count each one reads holds every upload started before it.
   */
  async create(owner: string, target: ResolvedTarget, namedBucket: boolean, contentType: string) {
    const before = this.starting.get(owner) ?? Promise.resolve();
    const mine = before
      .catch(() => {})
      .then(() => this.startLock.hold(owner, () => this.startNow(owner, target, namedBucket, contentType)));
    this.starting.set(owner, mine);
    try {
      return await mine;
    } finally {
      if (this.starting.get(owner) === mine) this.starting.delete(owner);
    }
  }

  /** Counts the owner's open uploads and writes the new one; called under the owner's turn. */
  private async startNow(owner: string, target: ResolvedTarget, namedBucket: boolean, contentType: string) {
    if ((await this.openKeys(owner)).length >= MAX_OPEN_UPLOADS) throw storageErrors.tooManyUploads(MAX_OPEN_UPLOADS);
    const storeUploadId = await this.store.createMultipart(target.bucket, target.key, contentType);
    const record: UploadRecord = {
      upload_id: randomUUID(),
      owner,
      bucket: target.bucket,
      key: target.key,
      folder: target.folder,
      named_bucket: namedBucket,
      content_type: contentType,
      store_upload_id: storeUploadId,
      created_at: new Date().toISOString(),
    };
    try {
      // Its key is new (a random ID): the write that makes the bucket on first use, as the owner records do.
      await writeJsonOnce(this.store, this.recordsBucket, this.recordKey(owner, record.upload_id), record);
    } catch (err) {
      // Without its record nobody could finish the upload or sweep it: give the store's upload up.
      await this.store.abortMultipart(target.bucket, target.key, storeUploadId).catch(() => {});
      throw err;
    }
    return record;
  }

  /** The owner's upload, unless it is unknown, someone else's or expired (404 UPLOAD_NOT_FOUND for all three). */
  async get(owner: string, uploadId: string): Promise<UploadRecord> {
    const record = (await readJson(this.store, this.recordsBucket, this.recordKey(owner, uploadId))) as
      | UploadRecord
      | undefined;
    if (!record || record.owner !== owner || this.expiresAt(record).getTime() <= Date.now()) {
      throw storageErrors.uploadNotFound();
    }
    return record;
  }

  /** The owner's unfinished uploads, oldest first. */
  async list(owner: string): Promise<UploadRecord[]> {
    const records = await Promise.all(
      (await this.openKeys(owner)).map((key) =>
        this.get(owner, key.slice(key.lastIndexOf('/') + 1)).catch((err: unknown) => {
          // Expired (not swept yet) or gone meanwhile.
          if ((err as { code?: string }).code === 'UPLOAD_NOT_FOUND') return undefined;
          throw err;
        }),
      ),
    );
    return records
      .filter((r): r is UploadRecord => r !== undefined)
      .sort((a, b) => a.created_at.localeCompare(b.created_at) || a.upload_id.localeCompare(b.upload_id));
  }

  /** The parts the store holds of the upload. */
  parts(record: UploadRecord): Promise<PartInfo[]> {
    return this.store.listParts(record.bucket, record.key, record.store_upload_id);
  }

  /**
   * How many bytes the part may have: what the upload may still take, counting every part but the one it replaces.
   * A part declared larger is refused before its bytes are read.
   */
  async roomFor(record: UploadRecord, partNumber: number): Promise<number> {
    const held = (await this.parts(record))
      .filter((p) => p.partNumber !== partNumber)
      .reduce((sum, p) => sum + p.size, 0);
    return Math.max(0, this.settings.maxSize - held);
  }

  /**
   * Stores one part (replacing a part of the same number); its ETag. Parts sent at once each fit the room they saw
   * before any of them was stored: when together they passed `max_upload_size`, the upload is given up (its parts
   * freed) and 413 answered, so concurrent parts cannot hold more than the bound.
   */
  async putPart(record: UploadRecord, part: IncomingPart): Promise<string> {
    const etag = await this.store.uploadPart({
      ...part,
      bucket: record.bucket,
      key: record.key,
      uploadId: record.store_upload_id,
    });
    await this.withinBound(record);
    return etag;
  }

  /**
   * Has the store copy one part from a byte range of an object (`first` to `last`, inclusive; the whole object
   * without them) of the version `source.etag`; the part's ETag and size. A range outside the object is 416, a part
   * over S3's largest (5 GiB) a 400, one that would pass `max_upload_size` with the other parts 413 before anything
   * is copied; parts copied at once are bounded as parts sent at once are.
   */
  async copyPart(
    record: UploadRecord,
    part: { partNumber: number; source: { bucket: string; key: string; etag: string; size: number } },
    range: { first: number; last: number } | undefined,
    signal?: AbortSignal,
  ): Promise<{ etag: string; size: number }> {
    const { source } = part;
    // Without a range, the whole source (an empty one too: 0 to -1, no byte).
    const first = range?.first ?? 0;
    const last = range?.last ?? source.size - 1;
    if (last < first && range) {
      throw errors.validation('a range ends at or after its first byte', [
        { path: 'body.range', message: 'the last byte is before the first' },
      ]);
    }
    if (last >= source.size) {
      throw storageErrors.rangeNotSatisfiable(
        `bytes ${first}-${last} are not within the source's ${source.size} bytes (the last byte is ${source.size - 1})`,
      );
    }
    const size = last - first + 1;
    if (size > MAX_PART_SIZE) {
      throw errors.validation(`a part is at most ${MAX_PART_SIZE} bytes (5 GiB); this one would have ${size}`, [
        { path: range ? 'body.range' : 'body.source', message: `at most ${MAX_PART_SIZE} bytes a part` },
      ]);
    }
    if (size > (await this.roomFor(record, part.partNumber))) throw storageErrors.uploadTooLarge(this.settings.maxSize);
    const etag = await this.store.copyPart({
      bucket: record.bucket,
      key: record.key,
      uploadId: record.store_upload_id,
      partNumber: part.partNumber,
      source: { bucket: source.bucket, key: source.key },
      etag: source.etag,
      first,
      last,
      signal,
    });
    await this.withinBound(record);
    return { etag, size };
  }

  /** Gives the upload up (413) when its parts together passed `max_upload_size` (parts stored at once). */
  private async withinBound(record: UploadRecord): Promise<void> {
    const held = (await this.parts(record)).reduce((sum, p) => sum + p.size, 0);
    if (held > this.settings.maxSize) {
      await this.abort(record).catch(() => {});
      throw storageErrors.uploadTooLarge(this.settings.maxSize);
    }
  }

  /**
   * Joins the parts into the object: the ones the client names (each with the ETag it was answered), else every
   * part the store holds, by number. Then forgets the upload.
   */
  async complete(record: UploadRecord, chosen?: StoredPart[]): Promise<void> {
    const held = await this.parts(record);
    const byNumber = new Map(held.map((p) => [p.partNumber, p]));
    let parts: PartInfo[];
    if (chosen) {
      parts = chosen.map((c, i) => {
        if (i > 0 && c.partNumber <= (chosen[i - 1]?.partNumber ?? 0)) {
          throw errors.validation('parts must be in ascending order of part_number, each once', [
            { path: `body.parts.${i}.part_number`, message: 'not above the part before it' },
          ]);
        }
        const part = byNumber.get(c.partNumber);
        if (!part) throw storageErrors.partsChanged(`part ${c.partNumber} was never stored`);
        if (!sameEntityTag(part.etag, c.etag)) {
          throw storageErrors.partsChanged(`part ${c.partNumber} has ETag ${part.etag} now, not ${c.etag}`);
        }
        return part;
      });
    } else {
      parts = held;
    }
    if (parts.length === 0) throw storageErrors.noParts();
    const small = parts.slice(0, -1).find((p) => p.size < MIN_PART_SIZE);
    if (small) throw storageErrors.partTooSmall(small.partNumber, MIN_PART_SIZE);
    if (parts.reduce((sum, p) => sum + p.size, 0) > this.settings.maxSize) {
      throw storageErrors.uploadTooLarge(this.settings.maxSize);
    }
    await this.store.completeMultipart(record.bucket, record.key, record.store_upload_id, parts);
    // The object is made: a record left behind (the store away a moment) is swept later, harmlessly.
    await this.forget(record).catch(() => {});
  }

  /** Gives the upload up: the store frees its parts, the record goes. */
  async abort(record: UploadRecord): Promise<void> {
    await this.store.abortMultipart(record.bucket, record.key, record.store_upload_id);
    await this.forget(record);
  }

  private forget(record: UploadRecord): Promise<void> {
    return this.store.delete(this.recordsBucket, this.recordKey(record.owner, record.upload_id));
  }

  /**
   * The bytes each owner's open uploads hold at the store now (their parts, as the store lists them): stored bytes as
   * much as an object's, so metered with them (a part copied from an object, the object deleted before a period's end
   * and the upload completed after it, was never billed). An upload the store no longer knows holds nothing.
   */
  async heldBytesByOwner(now = Date.now()): Promise<Map<string, number>> {
    const held = new Map<string, number>();
    for await (const entry of this.everyRecord()) {
      if (!this.isOpen(entry, now)) continue;
      const record = (await readJson(this.store, this.recordsBucket, entry.key)) as UploadRecord | undefined;
      if (!record) continue;
      const parts = await this.store.listParts(record.bucket, record.key, record.store_upload_id).catch((err) => {
        if (['UPLOAD_NOT_FOUND', 'BUCKET_NOT_FOUND'].includes((err as { code?: string }).code ?? '')) return [];
        throw err;
      });
      const bytes = parts.reduce((sum, part) => sum + part.size, 0);
      if (bytes > 0) held.set(record.owner, (held.get(record.owner) ?? 0) + bytes);
    }
    return held;
  }

  /**
   * Aborts every upload started more than `upload_expiry` ago (of every owner); how many. A record's time in the
   * listing is when it was written, so only expired uploads' records are read.
   */
  async sweep(now = Date.now()): Promise<number> {
    let swept = 0;
    for await (const entry of this.everyRecord()) {
      if (this.isOpen(entry, now)) continue;
      try {
        const record = (await readJson(this.store, this.recordsBucket, entry.key)) as UploadRecord | undefined;
        if (record) {
          await this.store.abortMultipart(record.bucket, record.key, record.store_upload_id).catch((err: unknown) => {
            // Its bucket gone: nothing left to free.
            if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
          });
        }
        await this.store.delete(this.recordsBucket, entry.key);
        swept++;
      } catch (err) {
        // One record that cannot be swept now (the store refusing it) does not hold up the others.
        this.logger?.warn({ err, record: entry.key }, 'an expired upload could not be swept; trying again later');
      }
    }
    return swept;
  }
}

/**
 * Runs the sweeper at start and then every `everyMs`, one sweep at a time; a failed sweep is logged and the next one
 * tries again. Stopping does not wait for a sweep under way (a store that does not answer would hold the shutdown):
 * closing the store ends it, and what it did not finish the next start's sweep does.
 */
export function startSweeper(uploads: Uploads, everyMs: number, logger: Logger): () => void {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const run = () => {
    uploads
      .sweep()
      .then((swept) => {
        if (swept > 0) logger.info({ swept }, 'expired uploads aborted');
      })
      .catch((err: unknown) => {
        if (!stopped) logger.warn({ err }, 'sweeping expired uploads failed; trying again later');
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(run, everyMs).unref();
      });
  };
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
