/**
 * A workload's files, moved through grants billing issues for its session (presigned URLs of exactly those objects in
 * the renter's storage): the daemon never holds the renter's credentials, and what it holds reaches nothing else.
 *
 * - **Inputs** are fetched before the workload starts into a directory of the daemon's, files read-only (0444), bound
 *   read-only at `/work/inputs/` in the sandbox. Their sizes together may not pass the disk limit.
 * - **Logs** (`stdout.log`, `stderr.log`, each already cut at `workloads.log_kb` by the sandbox) are uploaded whole
 *   every `workloads.log_interval` while they grow, and once more at the end: the renter reads them through storage a
 *   few seconds behind.
 * - **Outputs**: at the end, every regular file under the work directory's `output/` (symbolic links, devices and
 *   FIFOs are passed over and never followed: the workload made them; at most 1000 files, each at most 5 GiB, a
 *   single PUT, named as storage keys may be) is uploaded (`../upload.ts`, retried) under the session's output prefix, and billing is told what was written. The workload is
 *   gone by then: nothing it runs can change a file while it is read.
 */
import {
  chmodSync,
  createWriteStream,
  type Dirent,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
} from 'node:fs';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type billingClient, unwrap } from '@gpu/client';
import { type Logger, objectKeyProblem } from '@gpu/common';
import { MAX_SINGLE_PUT_BYTES, uploadFile } from '../upload.ts';

type Billing = ReturnType<typeof billingClient>;

/** What billing granted for the session's files. */
interface Grants {
  inputs: { key: string; path: string; url: string; size?: number }[];
  logs: { stdout: { url: string }; stderr: { url: string } };
  outputs: { path: string; key: string; url: string }[];
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
  /** Output files uploaded already (a later try sends only the rest). */
  private readonly uploaded = new Set<string>();
  private shipping: Promise<void> | undefined;

  constructor(
    private readonly billing: Billing,
    private readonly sessionId: string,
    private readonly logDir: string,
    private readonly logger: Logger,
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
      // No byte past the size storage checked when it signed (the renter may replace the object meanwhile), and no
      // transfer idle for a minute.
      const limit = input.size ?? 0;
      let received = 0;
      const capped = new Transform({
        transform(chunk: Buffer, _enc, done) {
          received += chunk.length;
          done(
            received > limit ? new InputsError(`input ${input.key} is larger than when it was granted`) : null,
            chunk,
          );
        },
      });
      try {
        const res = await fetch(input.url, { signal: AbortSignal.timeout(INPUT_TIMEOUT_MS) });
        if (!res.ok || !res.body) throw new InputsError(`input ${input.key}: the store answered ${res.status}`);
        await pipeline(
          Readable.fromWeb(res.body as import('node:stream/web').ReadableStream),
          capped,
          createWriteStream(file, { flags: 'wx', mode: 0o444 }),
        );
      } catch (err) {
        throw err instanceof InputsError ? err : new InputsError(`input ${input.key}: ${(err as Error).message}`);
      }
    }
    // Directories the workload's user can pass through and list, not write.
    const open = (d: string) => {
      chmodSync(d, 0o555);
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) open(path.join(d, e.name));
    };
    open(dir);
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
   * Uploads what the workload left under `outputDir` (paths of at most `maxPathBytes`) and tells billing what was
   * written; files uploaded by an earlier call that failed part-way are not sent again.
   */
  async uploadOutputs(outputDir: string, maxPathBytes: number): Promise<void> {
    const files = outputFiles(outputDir, maxPathBytes);
    if (files.dropped.length > 0) {
      this.logger.warn(
        { session_id: this.sessionId, dropped: files.dropped.length, first: files.dropped.slice(0, 5) },
        'some outputs are not uploaded (links, special files, too large, too many, or names storage refuses)',
      );
    }
    const due = files.found.filter((f) => !this.uploaded.has(f.path));
    for (let i = 0; i < due.length; i += GRANT_BATCH) {
      const batch = due.slice(i, i + GRANT_BATCH);
      const grants = await this.grant(batch.map((f) => f.path));
      for (const [j, out] of grants.outputs.entries()) {
        // A file's bytes stream from disk: the workload is gone, nothing changes them meanwhile, and the walk went
        // through real directories only.
        await uploadFile(path.join(outputDir, out.path), out.url, { attempts: 3 });
        this.uploaded.add(batch[j]!.path);
      }
    }
    if (files.found.length === 0) return;
    unwrap(
      await this.billing.POST('/api/v1/billing/sessions/{sessionID}/workload/outputs', {
        params: { path: { sessionID: this.sessionId } },
        body: { files: files.found },
      }),
    );
  }
}

/**
 * The regular files under `dir`, as paths relative to it (sorted), walked without following any link: `dir` itself
 * must be a real directory (a workload that replaced its output directory with a link to elsewhere has none), and
 * only real directories are entered. What is passed over (links, devices, FIFOs, sockets, files above 5 GiB, names
 * storage would refuse as keys or longer than `maxPathBytes`, files past the 1000th) is listed; the walk stops early
 * past the limit.
 */
function outputFiles(
  dir: string,
  maxPathBytes: number,
): { found: { path: string; size: number }[]; dropped: string[] } {
  const found: { path: string; size: number }[] = [];
  const dropped: string[] = [];
  try {
    if (!lstatSync(dir).isDirectory()) return { found, dropped: ['output (not a directory)'] };
  } catch {
    return { found, dropped };
  }
  const walk = (rel: string) => {
    let entries: Dirent[];
    try {
      entries = readdirSync(path.join(dir, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (found.length + dropped.length > 2 * MAX_OUTPUTS) return;
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        walk(p);
        continue;
      }
      let size = -1;
      try {
        // A name that is not UTF-8 cannot be named back: it is passed over.
        if (e.isFile()) size = lstatSync(path.join(dir, p)).size;
      } catch {}
      const fits = size >= 0 && size <= MAX_SINGLE_PUT_BYTES && Buffer.byteLength(p) <= maxPathBytes;
      if (!fits || found.length >= MAX_OUTPUTS || objectKeyProblem(p)) dropped.push(p);
      else found.push({ path: p, size });
    }
  };
  walk('');
  return { found, dropped };
}
