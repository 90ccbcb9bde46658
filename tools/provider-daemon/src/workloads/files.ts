/**
 * A workload's files, moved through grants billing issues for its session (presigned URLs of exactly those objects in
 * the renter's storage): the daemon never holds the renter's credentials, and what it holds reaches nothing else.
 *
 * - **Inputs** are fetched before the workload starts into a directory of the daemon's, files read-only (0444), bound
 *   read-only at `/work/inputs/` in the sandbox. Their sizes together may not pass the disk limit.
 * - **Logs** (`stdout.log`, `stderr.log`, each already cut at `workloads.log_kb` by the sandbox) are uploaded whole
 *   every `workloads.log_interval` while they grow, and once more at the end: the renter reads them through storage a
 *   few seconds behind.
 * - **Outputs**: at the end, every regular file under the work directory's `output/` (at most 1000 files, each at
 *   most 5 GiB, a single PUT, named as storage keys may be) is uploaded (`../upload.ts`, retried) under the session's
 *   output prefix, and billing is told what was written and what was not, each file with its reason: symbolic links,
 *   devices and FIFOs (passed over, never followed: the workload made them), files too large or too many, names
 *   storage refuses, and a file the store refuses while it takes the others (one refusal never holds up the rest).
 *   The workload is gone by then: nothing it runs can change a file while it is read.
 * - **A job's checkpoint** (checkpoint.ts makes and unpacks the tar): the one the job kept last is fetched before the
 *   workload starts, and each tar of `/work/checkpoint/` is one PUT to this attempt's own object, then said to billing.
 */
import {
  chmodSync,
  createWriteStream,
  type Dirent,
  constants as fsConstants,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { type FileHandle, lstat, open, readdir } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError, type billingClient, unwrap } from '@gpu/client';
import { type Logger, objectKeyProblem } from '@gpu/common';
import { MAX_SINGLE_PUT_BYTES, UploadError, uploadFile } from '../upload.ts';

type Billing = ReturnType<typeof billingClient>;

/** What billing granted for the session's files. */
interface Grants {
  inputs: { key: string; path: string; url: string; size?: number }[];
  logs: { stdout: { url: string }; stderr: { url: string } };
  outputs: { path: string; key: string; url: string }[];
  checkpoint?: { upload: { url: string }; restore?: { key: string; url: string; size: number } };
  expires_at: string;
}

/** The most output files one workload leaves (billing's bound too), and the largest one PUT carries. */
const MAX_OUTPUTS = 1000;
/** Output files asked for in one grant (storage signs at most 1000 writes at once, the two logs among them). */
const GRANT_BATCH = 500;
/** A grant is asked for again this long before it expires. */
const RENEW_BEFORE_MS = 60_000;

/** The longest one input may take to arrive. */
const INPUT_TIMEOUT_MS = 30 * 60_000;

/** Why a workload's inputs could not be made ready. */
class InputsError extends Error {}

/** An output that is not kept, and why. */
interface RefusedOutput {
  path: string;
  reason: string;
}

/** What a session's uploads got done so far (kept on disk by keeper.ts, so a restarted daemon goes on from there). */
export interface OutputProgress {
  /** Output paths uploaded already. */
  uploaded: string[];
  /** Outputs that will not be kept. */
  refused: RefusedOutput[];
  /** Called after each change of the two (they are changed in place). */
  onProgress(): void;
}

/** The most refused outputs named to billing (the rest are counted in the last one's reason). */
const MAX_REFUSED_NAMED = 100;

/** PUTs a log's bytes (read at once: the file grows while the workload runs) to a presigned URL. */
async function putBytes(url: string, body: Buffer): Promise<void> {
  const res = await fetch(url, { method: 'PUT', body, signal: AbortSignal.timeout(60_000) });
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`the store answered ${res.status}`);
}

export class SessionFiles {
  private grants: Grants | undefined;
  /** The size of each log when last uploaded. */
  private readonly shipped = new Map<string, number>();
  private shipping: Promise<void> | undefined;
  /** The checkpoint being kept, if any (the next waits for it). */
  private keeping: Promise<void> = Promise.resolve();

  constructor(
    private readonly billing: Billing,
    private readonly sessionId: string,
    private readonly logDir: string,
    private readonly logger: Logger,
    private readonly progress: OutputProgress = { uploaded: [], refused: [], onProgress: () => {} },
  ) {}

  /** Grants for the session's files (outputs: paths under `output/` to upload), asked for again when near expiry. */
  private async grant(outputs: string[] = []): Promise<Grants> {
    if (outputs.length === 0 && this.grants && Date.parse(this.grants.expires_at) - Date.now() > RENEW_BEFORE_MS) {
      return this.grants;
    }
    const grants = unwrap(
      await this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/grants', {
        params: { path: { sessionID: this.sessionId } },
        body: { outputs },
      }),
    );
    if (outputs.length === 0) this.grants = grants;
    return grants;
  }

  /** Fetches the inputs into `dir` (read-only files); throws `InputsError` when they cannot all be had. */
  async fetchInputs(dir: string, maxBytes: number): Promise<void> {
    const grants = await this.grant().catch((err: Error) => {
      throw new InputsError(`no grant for the inputs: ${err.message}`);
    });
    const total = grants.inputs.reduce((n, i) => n + (i.size ?? 0), 0);
    if (total > maxBytes) throw new InputsError(`the inputs hold ${total} bytes, above the disk limit ${maxBytes}`);
    mkdirSync(dir, { recursive: true });
    for (const input of grants.inputs) {
      const file = path.join(dir, input.path);
      // The spec's rules keep every path inside; said again here, where a file is written.
      if (!file.startsWith(`${dir}${path.sep}`)) throw new InputsError(`input path ${input.path} leaves the directory`);
      mkdirSync(path.dirname(file), { recursive: true });
      await download(input, file, 0o444, `input ${input.key}`);
    }
    // Directories the workload's user can pass through and list, not write.
    const passable = (d: string) => {
      chmodSync(d, 0o555);
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) passable(path.join(d, e.name));
    };
    passable(dir);
  }

  /**
   * Fetches the checkpoint the job kept last into `file` (the daemon's, 0600); false when there is none to restore.
   * Throws `InputsError` when it cannot be had, or holds more than `maxBytes` (checkpoint.ts `maxCheckpointBytes`).
   */
  async fetchCheckpoint(file: string, maxBytes: number): Promise<boolean> {
    const grants = await this.grant().catch((err: Error) => {
      throw new InputsError(`no grant for the checkpoint: ${err.message}`);
    });
    const restore = grants.checkpoint?.restore;
    if (!restore) return false;
    if (restore.size > maxBytes) {
      throw new InputsError(
        `the checkpoint holds ${restore.size} bytes, more than this machine's disk allowance takes`,
      );
    }
    rmSync(file, { force: true });
    await download(restore, file, 0o600, 'the checkpoint');
    return true;
  }

  /**
   * Keeps the tar at `file` as the job's checkpoint: one PUT (the store holds the earlier one whole until this one
   * is), then billing is told, so that the next attempt restores it. Nothing to do for a workload that keeps none.
   */
  keepCheckpoint(file: string): Promise<void> {
    // One after another, in the order they were made: an older tar never lands after a newer one.
    const run = this.keeping.then(async () => {
      const upload = (await this.grant()).checkpoint?.upload;
      if (!upload) return;
      await uploadFile(file, upload.url, { attempts: 3 });
      unwrap(
        await this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/checkpoint', {
          params: { path: { sessionID: this.sessionId } },
          body: { size: statSync(file).size },
        }),
      );
    });
    this.keeping = run.catch(() => {});
    return run;
  }

  /**
   * Says that the ended workload keeps no final checkpoint (none left, or one that cannot be kept): billing places
   * the job again without waiting for one. A billing that cannot be told waits out its own bound.
   */
  async noFinalCheckpoint(): Promise<void> {
    await this.keeping;
    unwrap(
      await this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/checkpoint', {
        params: { path: { sessionID: this.sessionId } },
        body: { size: null },
      }),
    );
  }

  /** Uploads the logs that grew since their last upload (one upload at a time; `final`: waits for it). */
  shipLogs(final = false): Promise<void> {
    if (this.shipping && !final) return this.shipping;
    const run = (this.shipping ?? Promise.resolve()).then(async () => {
      try {
        const grants = await this.grant();
        for (const [name, target] of [
          ['stdout.log', grants.logs.stdout],
          ['stderr.log', grants.logs.stderr],
        ] as const) {
          const file = path.join(this.logDir, name);
          let size: number;
          try {
            size = statSync(file).size;
          } catch {
            continue;
          }
          if (this.shipped.get(name) === size && !(final && !this.shipped.has(name))) continue;
          await putBytes(target.url, readFileSync(file));
          this.shipped.set(name, size);
        }
      } catch (err) {
        this.logger.warn({ err, session_id: this.sessionId }, 'uploading the workload logs failed; trying again');
        if (final) throw err;
      } finally {
        this.shipping = undefined;
      }
    });
    this.shipping = run;
    return run;
  }

  /**
   * Uploads what the workload left under `outputDir` (none: null; paths of at most `maxPathBytes`) and tells billing
   * what was written and what was not; files uploaded or refused by an earlier call (of this life or an earlier one:
   * `progress`) are not sent again. A file the store will not take while it takes others is refused, with the store's
   * words; when it takes none, this throws and the next call tries them all again (the store is down, not refusing).
   */
  async uploadOutputs(outputDir: string | null, maxPathBytes: number): Promise<void> {
    const { uploaded, refused } = this.progress;
    const files = outputDir ? await outputFiles(outputDir, maxPathBytes) : { found: [], dropped: [] };
    const settled = () => new Set([...uploaded, ...refused.map((r) => r.path)]);
    for (const d of files.dropped) if (!settled().has(d.path)) refused.push(d);
    const done = settled();
    const due = files.found.filter((f) => !done.has(f.path));
    const failed: RefusedOutput[] = [];
    let taken = 0;
    for (let i = 0; i < due.length; i += GRANT_BATCH) {
      const batch = due.slice(i, i + GRANT_BATCH).map((f) => f.path);
      for (const out of await this.outputGrants(batch)) {
        // A file's bytes stream from disk, opened through real directories only and held open: whatever is left
        // of the workload (a container whose removal failed) can swap no link in for it after the walk.
        const held = await openBeneath(outputDir!, out.path).catch(() => null);
        if (!held) {
          refused.push({ path: out.path, reason: 'not_a_regular_file' });
          this.progress.onProgress();
          continue;
        }
        try {
          await uploadFile(`/proc/self/fd/${held.fd}`, out.url, { attempts: 3 });
          uploaded.push(out.path);
          taken++;
        } catch (err) {
          const reason = `store_refused: ${(err as Error).message}`.slice(0, 300);
          // The store's answer about this file (a 4xx), or a failure where it takes the others: not kept.
          if (err instanceof UploadError && err.status !== undefined && !err.retryable)
            refused.push({ path: out.path, reason });
          else failed.push({ path: out.path, reason });
        } finally {
          await held.close().catch(() => {});
        }
        this.progress.onProgress();
      }
    }
    if (failed.length > 0) {
      if (taken === 0 && uploaded.length === 0) {
        throw new Error(`the store took none of the ${failed.length} outputs: ${failed[0]!.reason}`);
      }
      refused.push(...failed);
      this.progress.onProgress();
    }
    if (refused.length > 0) {
      this.logger.warn(
        { session_id: this.sessionId, refused: refused.length, first: refused.slice(0, 5) },
        'some outputs are not kept (each named to billing with why)',
      );
    }
    const written = files.found.filter((f) => uploaded.includes(f.path));
    if (written.length === 0 && refused.length === 0) return;
    const named = [...refused].sort((a, b) => (a.path < b.path ? -1 : 1)).slice(0, MAX_REFUSED_NAMED);
    if (refused.length > MAX_REFUSED_NAMED) {
      named[named.length - 1] = {
        ...named[named.length - 1]!,
        reason: `${named[named.length - 1]!.reason} (and ${refused.length - MAX_REFUSED_NAMED} more not kept)`.slice(
          0,
          300,
        ),
      };
    }
    unwrap(
      await this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/outputs', {
        params: { path: { sessionID: this.sessionId } },
        body: { files: written, refused: named },
      }),
    );
  }

  /**
   * Grants for the output paths; a path billing refuses (400 naming `body.outputs[i]`: a key storage cannot hold) is
   * refused with billing's words and the rest asked for again.
   */
  private async outputGrants(paths: string[]): Promise<{ path: string; url: string }[]> {
    let asked = paths;
    while (asked.length > 0) {
      try {
        return (await this.grant(asked)).outputs;
      } catch (err) {
        const bad = badOutputs(err, asked);
        if (bad.length === 0) throw err;
        this.progress.refused.push(...bad);
        this.progress.onProgress();
        asked = asked.filter((p) => !bad.some((b) => b.path === p));
      }
    }
    return [];
  }
}

/**
 * Fetches a granted object into `file` (a new file of `mode`): no byte past the size storage checked when it signed
 * (the renter may replace the object meanwhile), within `INPUT_TIMEOUT_MS`. Throws `InputsError`.
 */
async function download(
  object: { url: string; size?: number },
  file: string,
  mode: number,
  what: string,
): Promise<void> {
  const limit = object.size ?? 0;
  let received = 0;
  const capped = new Transform({
    transform(chunk: Buffer, _enc, done) {
      received += chunk.length;
      done(received > limit ? new InputsError(`${what} is larger than when it was granted`) : null, chunk);
    },
  });
  try {
    const res = await fetch(object.url, { signal: AbortSignal.timeout(INPUT_TIMEOUT_MS) });
    if (!res.ok || !res.body) throw new InputsError(`${what}: the store answered ${res.status}`);
    await pipeline(
      Readable.fromWeb(res.body as import('node:stream/web').ReadableStream),
      capped,
      createWriteStream(file, { flags: 'wx', mode }),
    );
  } catch (err) {
    throw err instanceof InputsError ? err : new InputsError(`${what}: ${(err as Error).message}`);
  }
}

/** The output paths a 400 from billing names (`body.outputs[3]`), with its words. */
function badOutputs(err: unknown, asked: string[]): RefusedOutput[] {
  if (!(err instanceof ApiError) || err.status !== 400) return [];
  const errors = (err.problem as { errors?: { path?: string; message?: string }[] } | undefined)?.errors ?? [];
  const out: RefusedOutput[] = [];
  for (const e of errors) {
    const m = /^body\.outputs\[(\d+)\]$/.exec(e.path ?? '');
    const p = m ? asked[Number(m[1])] : undefined;
    if (p !== undefined)
      out.push({ path: p, reason: `name_refused: ${e.message ?? 'storage cannot hold this key'}`.slice(0, 300) });
  }
  return out;
}

/** The most entries (directories included) an output walk looks at: past it, the rest is not looked at. */
const MAX_WALKED = 20 * MAX_OUTPUTS;

/**
 * The regular files under `dir`, as paths relative to it (sorted), walked without following any link: `dir` itself
 * must be a real directory (a workload that replaced its output directory with a link to elsewhere has none), and
 * only real directories are entered. What is passed over (links, devices, FIFOs, sockets, files above 5 GiB, names
 * storage would refuse as keys or longer than `maxPathBytes`, files past the 1000th) is listed; the walk stops early
 * past the limit, or past `MAX_WALKED` entries of any kind (a tree of empty directories). Each directory is read
 * asynchronously: a walk of a large tree never holds up the daemon's other sessions.
 */
async function outputFiles(
  dir: string,
  maxPathBytes: number,
): Promise<{ found: { path: string; size: number }[]; dropped: RefusedOutput[] }> {
  const found: { path: string; size: number }[] = [];
  const dropped: RefusedOutput[] = [];
  try {
    if (!(await lstat(dir)).isDirectory()) return { found, dropped: [{ path: '.', reason: 'output_not_a_directory' }] };
  } catch {
    return { found, dropped };
  }
  let walked = 0;
  const walk = async (rel: string): Promise<void> => {
    let entries: Dirent[];
    try {
      entries = await readdir(path.join(dir, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (found.length + dropped.length > 2 * MAX_OUTPUTS || ++walked > MAX_WALKED) return;
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        await walk(p);
        continue;
      }
      let size = -1;
      try {
        // A name that is not UTF-8 cannot be named back: it is passed over.
        if (e.isFile()) size = (await lstat(path.join(dir, p))).size;
      } catch {}
      const reason = e.isSymbolicLink()
        ? 'symbolic_link'
        : !e.isFile()
          ? 'not_a_regular_file'
          : size < 0
            ? 'unreadable'
            : size > MAX_SINGLE_PUT_BYTES
              ? 'too_large'
              : Buffer.byteLength(p) > maxPathBytes
                ? 'path_too_long'
                : objectKeyProblem(p)
                  ? `name_refused: ${objectKeyProblem(p)}`
                  : found.length >= MAX_OUTPUTS
                    ? 'too_many_files'
                    : null;
      if (reason) dropped.push({ path: p, reason: reason.slice(0, 300) });
      else found.push({ path: p, size });
    }
  };
  await walk('');
  return { found, dropped };
}

/**
 * Opens the regular file `rel` under `root`, every component opened without following a link (each directory by its
 * descriptor, `/proc/self/fd/<fd>/<name>`, with O_NOFOLLOW): a link anywhere on the way, or a file that is not a
 * regular one, throws. The handle reads the file the walk found, whatever is renamed or linked in after.
 */
export async function openBeneath(root: string, rel: string): Promise<FileHandle> {
  const { O_RDONLY, O_NOFOLLOW, O_DIRECTORY } = fsConstants;
  let at = await open(root, O_RDONLY | O_NOFOLLOW | O_DIRECTORY);
  try {
    const parts = rel.split('/');
    for (const [i, part] of parts.entries()) {
      const last = i === parts.length - 1;
      const next = await open(`/proc/self/fd/${at.fd}/${part}`, O_RDONLY | O_NOFOLLOW | (last ? 0 : O_DIRECTORY));
      await at.close();
      at = next;
    }
    if (!(await at.stat()).isFile()) throw new Error(`${rel} is not a regular file`);
    return at;
  } catch (err) {
    await at.close().catch(() => {});
    throw err;
  }
}
