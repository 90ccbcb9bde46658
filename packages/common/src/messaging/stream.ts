/** Creating (or widening) the JetStream stream that captures a service's subjects. */
import type { JetStreamManager, StreamConfig } from '@nats-io/jetstream';

export interface EnsureStreamOptions {
  /** Stream name, e.g. `REGISTRY`. */
  name: string;
  /** Subjects the stream must capture, e.g. `['registry.providers.>']`. */
  subjects: string[];
  /** How long messages are kept (default 7 days). */
  maxAgeMs?: number;
  /** Window in which a repeated `Nats-Msg-Id` is dropped as a duplicate (default 2 minutes). */
  duplicateWindowMs?: number;
}

const NANOS_PER_MS = 1_000_000;

/**
 * Ensures the stream exists and captures every subject in `opts.subjects`.
 * An existing stream keeps its other settings and subjects; missing subjects
 * are added. Safe to call from several instances at once.
 */
export async function ensureStream(jsm: JetStreamManager, opts: EnsureStreamOptions): Promise<void> {
  const config: Partial<StreamConfig> & { name: string } = {
    name: opts.name,
    subjects: opts.subjects,
    max_age: (opts.maxAgeMs ?? 7 * 24 * 3600 * 1000) * NANOS_PER_MS,
    duplicate_window: (opts.duplicateWindowMs ?? 120_000) * NANOS_PER_MS,
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    const existing = await jsm.streams.info(opts.name).catch(() => undefined);
    try {
      if (!existing) {
        await jsm.streams.add(config);
        return;
      }
      const have = new Set(existing.config.subjects ?? []);
      const missing = opts.subjects.filter((s) => !have.has(s));
      if (missing.length === 0) return;
      await jsm.streams.update(opts.name, { ...existing.config, subjects: [...have, ...missing] });
      return;
    } catch (err) {
      // Another instance may have created the stream between our info and add: look again.
      if (attempt === 2) throw (await claimedElsewhere(jsm, opts)) ?? err;
    }
  }
}

/**
 * NATS refuses two streams capturing one subject, with a bare "subjects overlap with an existing stream". Says
 * which stream holds which subject, so an operator knows to name that stream in the service's configuration.
 */
async function claimedElsewhere(jsm: JetStreamManager, opts: EnsureStreamOptions): Promise<Error | undefined> {
  for (const subject of opts.subjects) {
    const owner = await jsm.streams.find(subject).catch(() => undefined);
    if (owner !== undefined && owner !== opts.name) {
      return new Error(
        `JetStream stream ${opts.name} cannot capture ${subject}: stream ${owner} already does (configure the stream name ${owner}, or remove that stream)`,
      );
    }
  }
  return undefined;
}

/**
 * The name of the stream that captures `subject`, for a consumer of another service's events: whatever the owner
 * named it, and never created here (the owner creates its stream; a consumer that made one with a name of its own
 * would stop the owner from starting). Until the owner has made it, asks again with a growing pause (250 ms doubling
 * to 5 s); rejects when `signal` aborts.
 */
export async function awaitStream(
  jsm: JetStreamManager,
  subject: string,
  opts: { signal: AbortSignal; onWait?: (attempt: number) => void },
): Promise<string> {
  for (let attempt = 1; ; attempt++) {
    const found = await jsm.streams.find(subject).catch(() => undefined);
    if (found) return found;
    if (opts.signal.aborted) throw new Error('stopped while waiting for a stream');
    opts.onWait?.(attempt);
    const pause = Math.min(5000, 250 * 2 ** Math.min(attempt - 1, 5));
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, pause);
      opts.signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
    if (opts.signal.aborted) throw new Error('stopped while waiting for a stream');
  }
}
