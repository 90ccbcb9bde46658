/**
 * A session's files until they are kept: its directory under `run_dir` (logs, disk, inputs) from the moment it is
 * made, and, once its workload ended, the upload of its logs and outputs to the renter's storage, tried at every poll
 * until everything is kept or billing says the upload window closed (409).
 *
 * A job's workload that keeps a checkpoint has its checkpoint directory kept too, after its outputs (a tar of it as
 * the workload left it: checkpoint.ts), by a later life as well when the daemon died under it, so the job restarts
 * from what it wrote last; one that leaves none (or one that cannot be kept) is said to billing as none, so the job
 * placed again does not wait for it (`jobs.final_checkpoint_wait`).
 *
 * What the keeper knows is on disk, beside the files (`<session>/keep.json`: whether the workload keeps files in
 * storage, the longest output path, which outputs are uploaded already, which were refused and why), so a daemon
 * started again goes on where its earlier life stopped: it finds every session directory, uploads what is left within
 * the window, and removes the directory once it is done. A directory without a record (made by a life that died at
 * once) is removed. Nothing stays behind for good.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { ApiError, type billingClient } from '@gpu/client';
import type { Logger } from '@gpu/common';
import { writeDurably } from '../state.ts';
import { UploadError } from '../upload.ts';
import { CheckpointError, packDirectory } from './checkpoint.ts';
import { releaseDisk, reopenDisk } from './disk.ts';
import { SessionFiles } from './files.ts';

type Billing = ReturnType<typeof billingClient>;

const RECORD = 'keep.json';
/** A session's directory is named by its ID. */
const SESSION_DIR = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** What the keeper writes down of a session. */
interface Record {
  /** Whether its files go to the renter's storage (false: its logs stay on the machine). */
  keeps_files: boolean;
  max_path_bytes: number;
  /** Whether its workload ended (its files may be uploaded). */
  ended: boolean;
  /** Whether the keeper is done with it (what is left is its logs, kept on the machine). */
  done?: boolean;
  /** Outputs uploaded already. */
  uploaded: string[];
  /** Outputs that will not be kept, with why. */
  refused: { path: string; reason: string }[];
  /**
   * A job's workload that keeps a checkpoint: the largest tar of it (null: it keeps none), whether its final one is
   * packed (`checkpoint-final.tar`, sent again as it is) and whether it is done with.
   */
  checkpoint_max_bytes?: number | null;
  checkpoint_packed?: boolean;
  checkpoint_done?: boolean;
}

interface Kept {
  dir: string;
  record: Record;
  files: SessionFiles | null;
}

/** Whether the session's job waits for a final checkpoint from it that has not been kept (or said not to come). */
const owesFinalCheckpoint = (kept: Kept): boolean =>
  Boolean(kept.record.checkpoint_max_bytes) && !kept.record.checkpoint_done;

/**
 * Removes a session's directory but its logs (whatever it held: a filesystem of its own, inputs, a million files),
 * without blocking the event loop; never fails the caller.
 */
async function removeAllButLogs(dir: string, logger: Logger): Promise<void> {
  try {
    await releaseDisk(dir);
    for (const entry of readdirSync(dir)) {
      if (entry !== 'logs' && entry !== RECORD) await rm(path.join(dir, entry), { recursive: true, force: true });
    }
  } catch (err) {
    logger.warn({ err, dir }, 'a workload directory could not be removed whole');
  }
}

export class FileKeeper {
  private readonly sessions = new Map<string, Kept>();
  private readonly collecting = new Set<string>();

  constructor(
    private readonly billing: Billing,
    private readonly runDir: string,
    private readonly logger: Logger,
  ) {}

  /** Files of the session (its grants, its logs' uploads), null when it keeps none in storage. */
  filesOf(sessionId: string): SessionFiles | null {
    return this.sessions.get(sessionId)?.files ?? null;
  }

  /** A session's directory is made: from now on it is the keeper's, on disk too. */
  track(
    sessionId: string,
    opts: { keepsFiles: boolean; maxPathBytes: number; checkpointMaxBytes: number | null },
  ): SessionFiles | null {
    const dir = path.join(this.runDir, sessionId);
    const record: Record = {
      keeps_files: opts.keepsFiles,
      max_path_bytes: opts.maxPathBytes,
      ended: false,
      uploaded: [],
      refused: [],
      checkpoint_max_bytes: opts.checkpointMaxBytes,
    };
    const kept = { dir, record, files: this.files(sessionId, dir, record) };
    this.sessions.set(sessionId, kept);
    this.save(kept);
    return kept.files;
  }

  /**
   * The workload ended (`ran`), or never started: its files are uploaded now and at each poll until kept (a checkpoint
   * only of one that ran).
   */
  async ended(sessionId: string, ran = true): Promise<void> {
    const kept = this.sessions.get(sessionId);
    if (!kept) return;
    kept.record.ended = true;
    if (!ran) kept.record.checkpoint_done = true;
    this.save(kept);
    await this.collect(sessionId);
  }

  /** A session whose workload never ran (its inputs did not arrive, its image was not there): its directory goes. */
  async drop(sessionId: string): Promise<void> {
    const kept = this.sessions.get(sessionId);
    this.sessions.delete(sessionId);
    if (!kept) return;
    await releaseDisk(kept.dir).catch(() => {});
    await rm(kept.dir, { recursive: true, force: true }).catch(() => {});
  }

  /**
   * At the daemon's start: every session directory an earlier life left is taken up again (its record says how), and
   * one without a record is removed. `running`: the sessions whose workloads billing still shows (their directories
   * wait for the report of their loss). Gives back the sessions taken up.
   */
  async resume(): Promise<string[]> {
    const found: string[] = [];
    let entries: string[];
    try {
      entries = readdirSync(this.runDir);
    } catch {
      return found;
    }
    for (const id of entries) {
      if (!SESSION_DIR.test(id) || this.sessions.has(id)) continue;
      const dir = path.join(this.runDir, id);
      let record: Record;
      try {
        record = JSON.parse(readFileSync(path.join(dir, RECORD), 'utf8')) as Record;
      } catch (err) {
        this.logger.error(
          { session_id: id, err: (err as Error).message },
          "a session's record could not be read: its files are removed, not uploaded",
        );
        await removeAllButLogs(dir, this.logger);
        await rm(dir, { recursive: true, force: true }).catch(() => {});
        continue;
      }
      // Done with: its logs stay on the machine.
      if (record.done) continue;
      // Its workload is gone with the earlier life: what it left is uploaded as an ended one's.
      record.ended = true;
      const kept = { dir, record, files: this.files(id, dir, record) };
      this.sessions.set(id, kept);
      this.save(kept);
      found.push(id);
    }
    if (found.length > 0) this.logger.info({ sessions: found }, 'taking up the workload files an earlier life left');
    return found;
  }

  /** Tries every ended session's files again (each poll). */
  async tick(): Promise<void> {
    await Promise.all([...this.sessions].filter(([, k]) => k.record.ended).map(([id]) => this.collect(id)));
  }

  private files(sessionId: string, dir: string, record: Record): SessionFiles | null {
    if (!record.keeps_files) return null;
    return new SessionFiles(this.billing, sessionId, path.join(dir, 'logs'), this.logger, {
      uploaded: record.uploaded,
      refused: record.refused,
      onProgress: () => {
        const kept = this.sessions.get(sessionId);
        if (kept) this.save(kept);
      },
    });
  }

  /**
   * Uploads an ended workload's logs and outputs, then removes its directory. Until then it stays and is tried again
   * at each poll, until billing says its upload window closed or its job was placed again since (409), or that the
   * session is not this daemon's or not there (403, 404): then its directory goes but its logs.
   */
  private async collect(sessionId: string): Promise<void> {
    const kept = this.sessions.get(sessionId);
    if (!kept || this.collecting.has(sessionId)) return;
    this.collecting.add(sessionId);
    try {
      if (kept.files) {
        await kept.files.shipLogs(true);
        const disk = await reopenDisk(kept.dir);
        await kept.files.uploadOutputs(disk ? path.join(disk.workDir, 'output') : null, kept.record.max_path_bytes);
        // After its outputs, which a checkpoint the store cannot take yet never holds up. No disk left: none comes.
        if (disk) await this.keepFinalCheckpoint(sessionId, kept, disk.workDir);
        else if (owesFinalCheckpoint(kept)) await this.noFinalCheckpoint(sessionId, kept);
      }
      this.sessions.delete(sessionId);
      await removeAllButLogs(kept.dir, this.logger);
      // Kept in storage: nothing of it stays (without storage, its logs stay on the machine).
      if (kept.files) await rm(kept.dir, { recursive: true, force: true });
      else this.finish(kept);
    } catch (err) {
      const final = err instanceof ApiError && [403, 404, 409].includes(err.status);
      this.logger.warn(
        { err, session_id: sessionId },
        final
          ? 'billing takes no more of these files (the upload window closed, or the job was placed again): the rest are dropped'
          : 'uploading the workload files failed; trying again at the next poll',
      );
      if (final) {
        // Its final checkpoint will not come either: said, so that its job is not kept waiting for it.
        if (owesFinalCheckpoint(kept)) await this.noFinalCheckpoint(sessionId, kept).catch(() => {});
        this.sessions.delete(sessionId);
        await removeAllButLogs(kept.dir, this.logger);
        this.finish(kept);
      }
    } finally {
      this.collecting.delete(sessionId);
    }
  }

  /**
   * Tells billing that no final checkpoint will come. A billing out of reach (no answer, 5xx, 429, 401) is told again
   * at the next poll (thrown: the job waits for this word, `jobs.final_checkpoint_wait` at worst); one that refuses it
   * (another 4xx) would refuse it again, and waits out its own bound.
   */
  private async noFinalCheckpoint(sessionId: string, kept: Kept): Promise<void> {
    try {
      await kept.files?.noFinalCheckpoint();
    } catch (err) {
      // Out of reach, busy, or the daemon's own token refused (a new one is fetched): said again at the next poll.
      if (!(err instanceof ApiError) || err.status >= 500 || err.status === 429 || err.status === 401) throw err;
      this.logger.warn({ err, session_id: sessionId }, 'billing refused to be told that no final checkpoint comes');
    }
  }

  /**
   * A job's checkpoint as its workload left it (checkpoint.ts), kept once: a tar that cannot be made (too large) is
   * not tried again; a store or billing that cannot take it is, at the next poll.
   */
  private async keepFinalCheckpoint(sessionId: string, kept: Kept, workDir: string): Promise<void> {
    const max = kept.record.checkpoint_max_bytes;
    if (!max || kept.record.checkpoint_done || !kept.files) return;
    const out = path.join(kept.dir, 'checkpoint-final.tar');
    try {
      // Packed once: a store or billing that could not take it is sent the same tar again at the next poll.
      if (!kept.record.checkpoint_packed || !existsSync(out)) {
        kept.record.checkpoint_packed = await packDirectory(workDir, out, max);
        this.save(kept);
      }
      if (kept.record.checkpoint_packed) await kept.files.keepCheckpoint(out);
      else await this.noFinalCheckpoint(sessionId, kept);
    } catch (err) {
      // Tried again at the next poll when the store or billing could not be reached; not when the tar cannot be
      // made or the store refuses it.
      if (!(err instanceof CheckpointError || (err instanceof UploadError && !err.retryable))) throw err;
      this.logger.warn({ err, session_id: sessionId }, "the job's final checkpoint could not be kept");
      await this.noFinalCheckpoint(sessionId, kept);
    }
    rmSync(out, { force: true });
    kept.record.checkpoint_done = true;
    this.save(kept);
  }

  /** Done with it: its logs stay on the machine, and a later life leaves them. */
  private finish(kept: Kept): void {
    kept.record.done = true;
    this.save(kept);
  }

  private save(kept: Kept): void {
    if (!existsSync(kept.dir)) return;
    writeDurably(path.join(kept.dir, RECORD), JSON.stringify(kept.record));
  }
}
