/**
 * The registry's operations: each runs its database work with bounded retries
 * on transient errors (connection loss, serialization failure), and every
 * status change records its event in the outbox with the change
 * (`status-events.ts`).
 */
import { randomUUID } from 'node:crypto';
import { GroupCommit, isAppError, type Principal, type RetryOptions, withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import { listProviders, ModelNames } from '../db/discovery-repository.ts';
import { lockProviderStatus } from '../db/gpu-hold-repository.ts';
import {
  bindProvider,
  deleteProvider,
  findProvider,
  insertProvider,
  providerBinding,
  replaceProvider,
} from '../db/provider-repository.ts';
import { reliabilityBooks } from '../db/reliability-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import {
  isFullyRented,
  livenessPages,
  type PageRange,
  recordHeartbeats,
  type StatusWrite,
  type Beat as StoredBeat,
  setStatus,
  sweepOffline,
} from '../db/status-repository.ts';
import { registryErrors } from '../errors.ts';
import {
  assertMayBind,
  assertMayChangeOwner,
  assertMayRead,
  assertMayRegisterFor,
  assertMayWrite,
  discoveryScope,
  type MachineBinding,
  registeringDaemon,
  writeScope,
} from './access.ts';
import type { DiscoveryFilter } from './discovery.ts';
import type { GpuMetrics } from './gpu-fields.ts';
import { assertExplicitStatus } from './gpu-holds.ts';
import { holdAfterExplicit, type Provider, type ProviderInput, type ProviderStatus } from './provider.ts';
import { type Reliability, reliabilityOf } from './reliability.ts';
import { DAEMON_BOUND, type StatusOutbox } from './status-events.ts';

export interface RegistryServiceDeps {
  db: Kysely<RegistryDB>;
  /** Where status events are recorded (a disabled outbox when no NATS is configured). */
  outbox: StatusOutbox;
  offlineAfterMs: number;
  retry?: RetryOptions;
}

/** What a status write (an explicit change or a heartbeat) comes to; routes present it (`statusResultJson`). */
export interface StatusResult {
  id: string;
  previousStatus: ProviderStatus;
  status: ProviderStatus;
  lastSeenAt: Date;
}

const result = (w: StatusWrite): StatusResult => ({
  id: w.id,
  previousStatus: w.previous_status,
  status: w.status,
  // The row's own Date (a driver that hands text gets one made).
  lastSeenAt: w.last_seen_at instanceof Date ? w.last_seen_at : new Date(w.last_seen_at),
});

/** A heartbeat as a caller hands it in: who sends it, for which machine, with which metrics. */
export interface HeartbeatInput {
  actor: Principal;
  id: string;
  metrics: GpuMetrics[];
  correlationId?: string;
}

/**
 * A heartbeat waiting to be written with others: the repository's beat (its owner and daemon limits, null for none)
 * as it goes to `recordHeartbeats`, with the correlation ID its change's event carries.
 */
interface Beat extends StoredBeat {
  metrics: GpuMetrics[];
  correlationId?: string;
}

export class RegistryService {
  /**
   * Heartbeats that arrive together (every daemon, every interval; over HTTP, in a batch or over NATS) are written
   * in one statement (group commit): on this kind of machine each statement's socket write, which wakes a database
   * backend, costs the service more CPU than the rest of a heartbeat.
   */
  private readonly beats: GroupCommit<Beat, StatusWrite | undefined>;
  /** Each discovery term's model names, so that its next page is one statement (discovery-repository.ts). */
  private readonly modelNames = new ModelNames();

  constructor(private readonly deps: RegistryServiceDeps) {
    this.beats = new GroupCommit((beats) => this.recordBeats(beats), { maxBatch: 1000, maxQueued: 20_000 });
  }

  /**
   * One result per heartbeat, in order; of several for one provider, only the first can observe a change (and its
   * correlation ID goes on the change's event). A beat naming a GPU its provider lacks gets its `UnknownGpuIndex`.
   */
  private async recordBeats(beats: Beat[]): Promise<(StatusWrite | undefined | Error)[]> {
    const correlation = new Map<string, string | undefined>();
    for (const b of beats) if (!correlation.has(b.id)) correlation.set(b.id, b.correlationId);
    const recording = this.deps.outbox.recording('heartbeat', correlation);
    // Each statement of the write is retried on its own: those before it have committed. (The beats are the
    // repository's as they are: no copy of each.)
    const written = await recordHeartbeats(this.deps.db, beats, recording, (fn) => this.retry(fn));
    this.recorded(written.filter((w): w is StatusWrite => w !== undefined && !(w instanceof Error)));
    const answered = new Set<string>();
    return beats.map(({ id, owner, daemon }, i) => {
      const row = written[i];
      if (row === undefined || row instanceof Error) return row;
      // Written because of another beat of the batch: this one may not write that provider.
      if (owner !== null && row.owner_id !== owner) return undefined;
      if (daemon !== null && row.daemon_client_id !== null && row.daemon_client_id !== daemon) return undefined;
      if (!answered.has(id)) {
        answered.add(id);
        return row;
      }
      return { ...row, previous_status: row.status };
    });
  }

  /** How heartbeats have been grouped so far (batches and heartbeats), for the metrics. */
  get heartbeatStats() {
    return this.beats.stats;
  }

  /**
   * A write that found nothing: the provider is absent (404), or the actor's scope did not reach it (403: another
   * owner's, or bound to another daemon).
   */
  private async missing(actor: Principal, id: string): Promise<never> {
    assertMayWrite(actor, id, await this.bindingOf(id));
    throw registryErrors.providerNotFound(id);
  }

  private retry<T>(fn: (attempt: number) => Promise<T>): Promise<T> {
    return withRetry(fn, this.deps.retry);
  }

  /** Tells the outbox's relay when a write changed a status (and so recorded an event). */
  private recorded(writes: readonly Pick<StatusWrite, 'previous_status' | 'status'>[]): void {
    if (writes.some((w) => w.previous_status !== w.status)) this.deps.outbox.written();
  }

  private async mustFind(id: string): Promise<Provider> {
    const provider = await this.retry(() => findProvider(this.deps.db, id, this.deps.offlineAfterMs));
    if (!provider) throw registryErrors.providerNotFound(id);
    return provider;
  }

  /**
   * Registers a provider under a new UUID, bound to the daemon that registers it (none for anyone else);
   * `PROVIDER_ALREADY_EXISTS` when its owner has one of that name.
   */
  async register(actor: Principal, input: ProviderInput, correlationId?: string): Promise<Provider> {
    assertMayRegisterFor(actor, input.owner_id);
    const id = randomUUID();
    const recording = this.deps.outbox.recording('registered', correlationId);
    await this.retry(async (attempt) => {
      try {
        await insertProvider(this.deps.db, id, input, registeringDaemon(actor), recording);
      } catch (err) {
        // A retry after a lost commit acknowledgement meets its own row: that is success.
        const ours = attempt > 1 && isAppError(err) && (await providerBinding(this.deps.db, id)) !== undefined;
        if (!ours) throw err;
      }
    });
    this.deps.outbox.written();
    return this.mustFind(id);
  }

  async get(actor: Principal, id: string): Promise<Provider> {
    const provider = await this.mustFind(id);
    assertMayRead(actor, provider.owner_id);
    return provider;
  }

  /** A machine's reliability (reliability.ts); anyone with a token may read it. PROVIDER_NOT_FOUND for none. */
  async reliability(id: string): Promise<Reliability> {
    const books = await this.retry(() => reliabilityBooks(this.deps.db, id));
    if (!books) throw registryErrors.providerNotFound(id);
    return reliabilityOf(books);
  }

  /**
   * Discovery; a provider or daemon sees only its own machines. Heartbeat batches wait while it reads (`whileAsked`).
   */
  list(actor: Principal, filter: Omit<DiscoveryFilter, 'owner_id'>) {
    const scoped = { ...filter, owner_id: discoveryScope(actor) };
    return this.whileAsked(() =>
      this.retry(() => listProviders(this.deps.db, scoped, this.deps.offlineAfterMs, this.modelNames)),
    );
  }

  /**
   * Runs a read that someone waits for (discovery, the market's search) with the heartbeat group commit held
   * (`GroupCommit.hold`): no heartbeat batch leaves meanwhile (for at most 50 ms, or until 1,000 are queued), so its
   * statement does not share PostgreSQL's CPU with this instance's heartbeat writes, whose answers nobody waits on.
   */
  async whileAsked<T>(read: () => Promise<T>): Promise<T> {
    const release = this.beats.hold();
    try {
      return await read();
    } finally {
      release();
    }
  }

  /**
   * Full update: every writable field and the GPU list; not found when absent, a conflict on a name clash or on a
   * status that contradicts the rental sessions (`assertExplicitStatus`); a status holds or releases the machine as an
   * explicit change does (`holdAfterExplicit`).
   */
  async update(actor: Principal, id: string, input: ProviderInput, correlationId?: string): Promise<Provider> {
    const machine = await this.bindingOf(id);
    assertMayWrite(actor, id, machine);
    assertMayChangeOwner(actor, machine.owner_id, input.owner_id);
    const recording = this.deps.outbox.recording('update', correlationId);
    const { status } = input;
    const guard =
      status === undefined ? undefined : (fullyRented: boolean) => assertExplicitStatus(id, status, fullyRented);
    const allowed = (locked: MachineBinding) => {
      assertMayWrite(actor, id, locked);
      assertMayChangeOwner(actor, locked.owner_id, input.owner_id);
    };
    const outcome = await this.retry(() => replaceProvider(this.deps.db, id, input, recording, guard, allowed));
    if (!outcome) throw registryErrors.providerNotFound(id);
    this.recorded([{ previous_status: outcome.previous, status: outcome.status }]);
    return this.mustFind(id);
  }

  /**
   * An explicit status change, under the provider's row lock; STATUS_CONTRADICTS_SESSIONS when it contradicts the
   * provider's rental sessions (`idle` while fully rented). `busy` holds the machine, `idle` lifts the hold
   * (`holdAfterExplicit`).
   */
  async setStatus(actor: Principal, id: string, status: ProviderStatus, correlationId?: string): Promise<StatusResult> {
    const scope = writeScope(actor);
    const recording = this.deps.outbox.recording('explicit', correlationId);
    const written = await this.retry(() =>
      this.deps.db.transaction().execute(async (trx) => {
        if ((await lockProviderStatus(trx, id, scope)) === undefined) return undefined;
        assertExplicitStatus(id, status, await isFullyRented(trx, id));
        return setStatus(trx, id, status, holdAfterExplicit(status), recording, scope);
      }),
    );
    if (!written) return this.missing(actor, id);
    this.recorded([written]);
    return result(written);
  }

  /**
   * A heartbeat (the rule: `REVIVED_BY_HEARTBEAT` in `provider.ts`), written with the others that arrive meanwhile;
   * `UnknownGpuIndex` for a GPU the provider lacks (and nothing of this beat is written).
   */
  async heartbeat(actor: Principal, id: string, metrics: GpuMetrics[], correlationId?: string): Promise<StatusResult> {
    const [outcome] = await this.heartbeats([{ actor, id, metrics, correlationId }]);
    if (outcome instanceof Error) throw outcome;
    return outcome as StatusResult;
  }

  /**
   * Several heartbeats, each as by `heartbeat` (a request's batch): one outcome per heartbeat, in order, its result
   * or its error (`heartbeatsEach`); never rejects.
   */
  async heartbeats(beats: HeartbeatInput[]): Promise<(StatusResult | Error)[]> {
    const outcomes: (StatusResult | Error)[] = new Array(beats.length);
    await this.heartbeatsEach(beats, (i, outcome) => {
      outcomes[i] = outcome;
    });
    return outcomes;
  }

  /**
   * Several heartbeats, each as by `heartbeat` (a turn's NATS messages, a request's batch): they join the group commit
   * together, with no promise each, and `settle(i, outcome)` hears each one's outcome as soon as it is known: its
   * result, or its error (a sender with no write scope, a machine absent or out of its reach, a GPU it lacks, a full
   * write queue). Resolves once every one is settled; never rejects.
   */
  async heartbeatsEach(beats: HeartbeatInput[], settle: (index: number, outcome: StatusResult | Error) => void) {
    const items: Beat[] = [];
    const places: number[] = [];
    beats.forEach(({ actor, id, metrics, correlationId }, i) => {
      try {
        const scope = writeScope(actor);
        // The ID as PostgreSQL answers it (lower-case): the results are matched to their beats by it.
        const key = id.toLowerCase();
        items.push({ id: key, owner: scope?.owner ?? null, daemon: scope?.daemon ?? null, metrics, correlationId });
        places.push(i);
      } catch (err) {
        settle(i, err as Error);
      }
    });
    const written = await this.beats.submitAll(items);
    const unwritten: Promise<void>[] = [];
    written.forEach((w, k) => {
      const i = places[k]!;
      if (w instanceof Error) settle(i, w);
      else if (w) settle(i, result(w));
      else {
        // Nothing written (rare): whether the machine is absent or out of reach is one read each, settled alone.
        const { actor, id } = beats[i]!;
        unwritten.push(this.missing(actor, id).catch((err: Error) => settle(i, err)));
      }
    });
    if (unwritten.length > 0) await Promise.all(unwritten);
  }

  /**
   * Deletes a provider, rented or not, recording its `provider.removed` event with the delete: billing ends the
   * sessions still running on it, billed to the last minute its daemon reported (without NATS billing finds the
   * machine gone when it next looks: `billing.provider_check_interval`).
   */
  async remove(actor: Principal, id: string, correlationId?: string): Promise<void> {
    const scope = writeScope(actor);
    const recording = this.deps.outbox.recording('removed', correlationId);
    const deleted = await this.retry(() => deleteProvider(this.deps.db, id, scope, recording));
    if (!deleted) return this.missing(actor, id);
    this.deps.outbox.written();
  }

  /**
   * Binds the machine to the daemon client `clientId` (null: none; `assertMayBind`: a daemon claims a machine bound to
   * none for itself, its owner binds it to any client), recording a `provider.daemon_bound` event when the binding
   * changes (billing moves the machine's running sessions to that client). The machine as it is now.
   */
  async bindDaemon(actor: Principal, id: string, clientId: string | null, correlationId?: string): Promise<Provider> {
    assertMayBind(actor, id, await this.bindingOf(id), clientId);
    const bound = await this.retry(() =>
      bindProvider(this.deps.db, id, clientId, writeScope(actor), (tx, binding) =>
        this.deps.outbox.record(
          tx,
          [{ kind: DAEMON_BOUND, data: { type: DAEMON_BOUND, provider_id: id, ...binding } }],
          correlationId,
        ),
      ),
    );
    // Bound to another daemon (or removed) since the check: as the check would have answered then.
    if (!bound) return this.missing(actor, id);
    this.deps.outbox.written();
    return this.mustFind(id);
  }

  /** The owner of a provider and the daemon it is bound to; not found when it does not exist. */
  private async bindingOf(id: string): Promise<MachineBinding> {
    const machine = await this.retry(() => providerBinding(this.deps.db, id));
    if (machine === undefined) throw registryErrors.providerNotFound(id);
    return machine;
  }

  /**
   * Stores `offline` for every provider silent past the bound (or, with `pages`, for those whose narrow rows are in
   * that range of the narrow table's pages), recording each change's event once: batches of `batch` until one comes
   * back short. The narrow rows' clock is in no index (a heartbeat's write stays heap-only), so each batch reads the
   * narrow rows (of the range), every state that falls offline at a time.
   */
  async sweepOffline(batch = 500, pages?: PageRange): Promise<number> {
    const recording = this.deps.outbox.recording('offline_timeout');
    let total = 0;
    for (;;) {
      const rows = await this.retry(() =>
        sweepOffline(this.deps.db, this.deps.offlineAfterMs, batch, recording, pages),
      );
      this.recorded(rows);
      total += rows.length;
      if (rows.length < batch) return total;
    }
  }

  /** Where the periodic sweep's next slice starts (a page of the narrow table). */
  private sweptTo = 0;

  /**
   * The periodic sweep: the next of `slices` slices of the narrow table's pages, so that each run reads a part of the
   * table and every row is read once per `slices` runs (the whole table at a million providers is about 150 ms of
   * one core; a slice, a fraction of it, every `offline_sweep_interval`).
   */
  async sweepSlice(slices: number): Promise<number> {
    const pages = await this.retry(() => livenessPages(this.deps.db));
    const step = Math.max(1, Math.ceil(pages / Math.max(1, slices)));
    if (this.sweptTo >= pages) this.sweptTo = 0;
    const from = this.sweptTo;
    this.sweptTo = from + step;
    // The last slice runs to the table's end, wherever it has grown to.
    return this.sweepOffline(500, { from, to: this.sweptTo >= pages ? undefined : this.sweptTo });
  }
}
