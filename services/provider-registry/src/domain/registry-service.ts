/**
 * The registry's operations: each runs its database work with bounded retries
 * on transient errors (connection loss, serialization failure) and emits the
 * status events its changes cause.
 */
import { randomUUID } from 'node:crypto';
import { GroupCommit, isAppError, type RetryOptions, withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import { listProviders } from '../db/discovery-repository.ts';
import {
  deleteProvider,
  findProvider,
  insertProvider,
  providerOwner,
  replaceProvider,
} from '../db/provider-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import {
  recordHeartbeat,
  recordHeartbeats,
  type StatusWrite,
  setStatus,
  sweepOffline,
} from '../db/status-repository.ts';
import { registryErrors } from '../errors.ts';
import type { DiscoveryFilter } from './discovery.ts';
import type {
  GpuMetrics,
  Provider,
  ProviderInput,
  ProviderStatus,
  StatusChange,
  StatusChangeReason,
} from './provider.ts';
import type { StatusEvents } from './status-events.ts';

export interface RegistryServiceDeps {
  db: Kysely<RegistryDB>;
  events: StatusEvents;
  offlineAfterMs: number;
  retry?: RetryOptions;
}

/** Result of a status write as the API reports it. */
export interface StatusResult {
  id: string;
  previous_status: ProviderStatus;
  status: ProviderStatus;
  last_seen_at: string;
}

const change = (w: StatusWrite, reason: StatusChangeReason): StatusChange => ({
  provider_id: w.id,
  owner_id: w.owner_id,
  previous_status: w.previous_status,
  status: w.status,
  reason,
  occurred_at: new Date().toISOString(),
});

const result = (w: StatusWrite): StatusResult => ({
  id: w.id,
  previous_status: w.previous_status,
  status: w.status,
  last_seen_at: new Date(w.last_seen_at).toISOString(),
});

export class RegistryService {
  /**
   * Heartbeats without metrics (the common kind: every daemon, every interval) that arrive together are written
   * in one statement (group commit). On this kind of machine each statement's socket write, which wakes a
   * database backend, cost the service more CPU than the rest of a heartbeat.
   */
  private readonly beats: GroupCommit<string, StatusWrite | undefined>;

  constructor(private readonly deps: RegistryServiceDeps) {
    this.beats = new GroupCommit((ids) => this.recordBeats(ids));
  }

  /** One result per heartbeat, in order; of several for one provider, only the first can observe a change. */
  private async recordBeats(ids: string[]): Promise<(StatusWrite | undefined)[]> {
    const written = await this.retry(() => recordHeartbeats(this.deps.db, [...new Set(ids)]));
    const answered = new Set<string>();
    return ids.map((id) => {
      const row = written.get(id);
      if (!row || !answered.has(id)) {
        answered.add(id);
        return row;
      }
      return { ...row, previous_status: row.status };
    });
  }

  private retry<T>(fn: (attempt: number) => Promise<T>): Promise<T> {
    return withRetry(fn, this.deps.retry);
  }

  private async mustFind(id: string): Promise<Provider> {
    const provider = await this.retry(() => findProvider(this.deps.db, id, this.deps.offlineAfterMs));
    if (!provider) throw registryErrors.providerNotFound(id);
    return provider;
  }

  /** Registers a provider under a new UUID; 409 when its owner already has a provider of that name. */
  async register(input: ProviderInput, correlationId?: string): Promise<Provider> {
    const id = randomUUID();
    await this.retry(async (attempt) => {
      try {
        await insertProvider(this.deps.db, id, input);
      } catch (err) {
        // A retry after a lost commit acknowledgement meets its own row: that is success.
        const ours = attempt > 1 && isAppError(err) && (await providerOwner(this.deps.db, id)) !== undefined;
        if (!ours) throw err;
      }
    });
    const provider = await this.mustFind(id);
    this.deps.events.emit(
      [
        {
          provider_id: id,
          owner_id: provider.owner_id,
          previous_status: null,
          status: input.status ?? 'idle',
          reason: 'registered',
          occurred_at: provider.registered_at,
        },
      ],
      correlationId,
    );
    return provider;
  }

  get(id: string): Promise<Provider> {
    return this.mustFind(id);
  }

  list(filter: DiscoveryFilter) {
    return this.retry(() => listProviders(this.deps.db, filter, this.deps.offlineAfterMs));
  }

  /** Full update: every writable field and the GPU list; 404 when absent, 409 on a name clash. */
  async update(id: string, input: ProviderInput, correlationId?: string): Promise<Provider> {
    const outcome = await this.retry(() => replaceProvider(this.deps.db, id, input));
    if (!outcome) throw registryErrors.providerNotFound(id);
    const provider = await this.mustFind(id);
    const status = input.status ?? outcome.previous;
    this.deps.events.emit(
      [
        {
          provider_id: id,
          owner_id: provider.owner_id,
          previous_status: outcome.previous,
          status,
          reason: 'update',
          occurred_at: new Date().toISOString(),
        },
      ],
      correlationId,
    );
    return provider;
  }

  async setStatus(id: string, status: ProviderStatus, correlationId?: string): Promise<StatusResult> {
    const written = await this.retry(() => setStatus(this.deps.db, id, status));
    if (!written) throw registryErrors.providerNotFound(id);
    this.deps.events.emit([change(written, 'explicit')], correlationId);
    return result(written);
  }

  async heartbeat(id: string, metrics: GpuMetrics[], correlationId?: string): Promise<StatusResult> {
    const written =
      metrics.length === 0
        ? await this.beats.submit(id)
        : await this.retry(() => recordHeartbeat(this.deps.db, id, metrics));
    if (!written) throw registryErrors.providerNotFound(id);
    this.deps.events.emit([change(written, 'heartbeat')], correlationId);
    return result(written);
  }

  async remove(id: string): Promise<void> {
    const deleted = await this.retry(() => deleteProvider(this.deps.db, id));
    if (!deleted) throw registryErrors.providerNotFound(id);
  }

  /** The owner of a provider; 404 when it does not exist. */
  async ownerOf(id: string): Promise<string> {
    const owner = await this.retry(() => providerOwner(this.deps.db, id));
    if (owner === undefined) throw registryErrors.providerNotFound(id);
    return owner;
  }

  /** Stores `offline` for every provider silent past the bound, publishing each change once. */
  async sweepOffline(batch = 500): Promise<number> {
    let total = 0;
    for (;;) {
      const rows = await this.retry(() => sweepOffline(this.deps.db, this.deps.offlineAfterMs, batch));
      this.deps.events.emit(rows.map((r) => change(r, 'offline_timeout')));
      total += rows.length;
      if (rows.length < batch) return total;
    }
  }
}
