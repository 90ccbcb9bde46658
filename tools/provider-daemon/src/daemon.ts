/**
 * The daemon's work with the registry: attach to this machine's provider record (re-attach after a restart by the ID
 * in its state file, or by name when the state is lost; register it when there is none; update it when the GPUs
 * changed), then heartbeat with live metrics every `heartbeat_interval`. A service that cannot be reached is tried
 * again with exponential backoff up to `max_backoff`; a record deleted under it is registered again. The machine is
 * bound to this daemon's client at the registry (registering binds it; attaching claims a record bound to none; one
 * bound to another client of the owner is not this daemon's to run, and attaching fails saying so). On a clean stop
 * the machine leaves the market at once (`leaveMarket`).
 */
import { hostname as osHostname } from 'node:os';
import { isDeepStrictEqual } from 'node:util';
import { registryClient, type TokenSource, unwrap } from '@gpu/client';
import { durationMs, type Logger } from '@gpu/common';
import { decodeJwt } from 'jose';
import type { DaemonConfig } from './config.ts';
import { MetricChanges } from './gpu/metric-changes.ts';
import type { GpuReading } from './gpu/nvidia-smi.ts';
import { gpuMetrics, gpuSpec } from './gpu/registry-gpu.ts';
import type { GpuSource } from './gpu/source.ts';
import type { HeartbeatChannel } from './heartbeats.ts';
import { readState, writeState } from './state.ts';
import type { UsageReporter } from './usage.ts';

export interface DaemonDeps {
  config: DaemonConfig;
  logger: Logger;
  gpus: GpuSource;
  token: TokenSource;
  /** Reports the running sessions' usage to billing after each heartbeat (none: heartbeats only). */
  usage?: UsageReporter;
  /** Heartbeats over NATS (`heartbeats.ts`); absent: over HTTP. */
  beats?: HeartbeatChannel;
  /** The clock's sleep (tests shorten it). */
  sleep?: (ms: number) => Promise<void>;
  /** Called once the machine's ID is known after an attach (the workload runner listens for its nudges then). */
  onAttached?: (providerId: string) => void;
  /**
   * The MB of disk each workload gets on a machine of so many GPUs (the workload runner's `diskMb`: what the disk
   * holds, at most `workloads.disk_mb`); absent: `workloads.disk_mb`.
   */
  workloadDiskMb?: (gpus: number) => number;
}

export class ProviderDaemon {
  providerId: string | undefined;
  private readonly registry;
  private stopped = false;
  /** Which metrics each heartbeat carries (`gpu/metric-changes.ts`). */
  private readonly metrics = new MetricChanges();
  private wake: (() => void) | undefined;
  /**
   * Whether this life attached (the state file names the record, but a start always attaches: what changed while the
   * daemon was stopped, its GPUs, name or disk, reaches the record, and the machine is claimed for this client).
   */
  private attached = false;

  constructor(private readonly deps: DaemonDeps) {
    this.registry = registryClient({
      baseUrl: deps.config.registry_url,
      token: deps.token,
      timeoutMs: durationMs(deps.config.request_timeout),
    });
    this.providerId = readState(deps.config.state_file, (why) => deps.logger.warn(why)).provider_id;
  }

  /** The provider owner the daemon's token acts for (its `owner_id` claim) and its own client ID. */
  private async identity(): Promise<{ ownerId: string; clientId: string }> {
    const claims = decodeJwt(await this.deps.token.get());
    if (typeof claims.owner_id !== 'string' || typeof claims.client_id !== 'string') {
      throw new Error(
        'the credentials are not a daemon client: its token has no owner_id (create a client with role daemon)',
      );
    }
    return { ownerId: claims.owner_id, clientId: claims.client_id };
  }

  private async ownerId(): Promise<string> {
    return (await this.identity()).ownerId;
  }

  /**
   * Makes sure the machine's record is this daemon's: bound to its client already, or bound to none, which it then
   * claims (a machine registered before bindings, or by its owner's own token). One bound to another daemon client is
   * not this daemon's to run: an error that says what the owner does about it.
   */
  private async claim(record: { id: string; daemon_client_id?: string | null }): Promise<void> {
    // A registry from before bindings says nothing of them: nothing to claim.
    if (record.daemon_client_id === undefined) return;
    const { clientId } = await this.identity();
    const bound = record.daemon_client_id;
    if (bound === clientId) return;
    if (bound !== null) {
      throw new Error(
        `machine ${record.id} is bound to another daemon client (${bound}), not this one (${clientId}): its owner ` +
          `binds it to this client (PUT /providers/${record.id}/daemon {"client_id": "${clientId}"}) after a ` +
          "reinstall, or this daemon runs with that client's credentials",
      );
    }
    unwrap(
      await this.registry.PUT('/providers/{providerID}/daemon', {
        params: { path: { providerID: record.id } },
        body: { client_id: clientId },
      }),
    );
    this.deps.logger.info({ provider_id: record.id, client_id: clientId }, 'machine bound to this daemon client');
  }

  private async body(readings: GpuReading[]): Promise<MachineBody> {
    const p = this.deps.config.provider;
    return {
      owner_id: await this.ownerId(),
      name: p.name,
      hostname: p.hostname || osHostname(),
      ...(p.ip_address ? { ip_address: p.ip_address } : {}),
      ...(p.location ? { location: p.location } : {}),
      // The disk each workload gets: renters search the market by it.
      disk_mb: this.deps.workloadDiskMb?.(readings.length) ?? this.deps.config.workloads.disk_mb,
      metadata: { ...p.metadata, gpu_source: this.deps.gpus.kind },
      gpus: readings.map(gpuSpec),
    };
  }

  /** Attaches to this machine's record (see the file's comment); returns its ID. */
  async attach(): Promise<string> {
    const readings = await this.deps.gpus.read();
    if (readings.length === 0) throw new Error('no GPU found on this machine');
    const body = await this.body(readings);
    let id = this.providerId;
    if (id) {
      const current = await this.registry.GET('/providers/{providerID}', { params: { path: { providerID: id } } });
      if (current.response.status === 404) {
        this.deps.logger.warn({ provider_id: id }, 'the registry no longer knows this machine: registering it again');
        id = undefined;
      } else {
        const record = unwrap(current);
        await this.claim(record);
        if (recordChanged(record, body)) {
          const updated = await this.registry.PUT('/providers/{providerID}', {
            params: { path: { providerID: id } },
            body: body as never,
          });
          // Sessions hold GPUs by their place in the list: the registry keeps the old list until they end, and the
          // daemon reports on under it (the next start updates it).
          if ((updated.error as { code?: string } | undefined)?.code === 'GPUS_RENTED') {
            this.deps.logger.warn(
              { provider_id: id },
              'the GPU list changed while rental sessions hold its GPUs: the registry keeps the old one until they end',
            );
          } else {
            unwrap(updated);
            this.deps.logger.info({ provider_id: id }, 'provider record updated: the GPUs, name or disk changed');
          }
        }
      }
    }
    if (!id) id = await this.register(body);
    this.providerId = id;
    this.attached = true;
    writeState(this.deps.config.state_file, { ...readState(this.deps.config.state_file), provider_id: id });
    this.deps.logger.info({ provider_id: id, gpus: readings.map((g) => g.name) }, 'attached to the provider record');
    this.deps.onAttached?.(id);
    return id;
  }

  private async register(body: Awaited<ReturnType<ProviderDaemon['body']>>): Promise<string> {
    const created = await this.registry.POST('/providers', { body: body as never });
    if (created.response.ok) return unwrap(created).id;
    // The owner already has a machine of this name: this one, whose state file was lost. Adopt it.
    if ((created.error as { code?: string } | undefined)?.code === 'PROVIDER_ALREADY_EXISTS') {
      const own = unwrap(await this.registry.GET('/providers', { params: { query: { limit: 1000 } } }));
      const mine = own.find((p) => p.name === body.name);
      if (mine) {
        await this.claim(mine);
        return mine.id;
      }
    }
    return unwrap(created).id; // throws the problem as an ApiError
  }

  /**
   * One heartbeat with the GPUs' live metrics that moved (`MetricChanges`), over NATS when it is configured and takes
   * it, else over HTTP (re-registering a record deleted under it), then the usage of the running sessions on the
   * machine. A usage report that fails is logged and sent again on the next beat (its message ID names its minute,
   * so billing applies it once); it never stops the heartbeats.
   */
  async heartbeat(): Promise<void> {
    const id = this.providerId ?? (await this.attach());
    const readings = await this.deps.gpus.read();
    const body = { gpu_metrics: this.metrics.pick(readings.map((r, i) => gpuMetrics(r, i))) };
    let status: number;
    try {
      status = await this.send(id, body);
    } catch (err) {
      // The registry may not hold what this beat carried: the next one sends everything.
      this.metrics.reset();
      throw err;
    }
    if (status === 404) {
      this.providerId = undefined;
      this.metrics.reset();
      await this.attach();
      return;
    }
    if (this.deps.usage) {
      await this.deps.usage
        .report(id, readings)
        .catch((err) => this.deps.logger.warn({ err }, 'usage report failed; it is sent again on the next beat'));
    }
  }

  /** Heartbeats over NATS since the last one a registry answered with 200 (none yet: the next one asks). */
  private unanswered = Number.POSITIVE_INFINITY;

  /**
   * Sends one heartbeat: its status (200, or 404 for a record that is gone); throws for any other refusal. Over NATS
   * first: an answer of 401 (a token that expired on the way) goes again over HTTP, whose client renews it. A beat
   * published unanswered counts as 200; a refusal of it shows at the next one that asks.
   */
  private async send(id: string, body: { gpu_metrics: unknown[] }): Promise<number> {
    // An answer where one is needed: a beat with metrics, or one `heartbeat_answer_every` after the last answered.
    const ask = body.gpu_metrics.length > 0 || this.unanswered + 1 >= this.deps.config.heartbeat_answer_every;
    const answer = await this.deps.beats?.send(id, body, ask);
    if (answer === 'published') {
      this.unanswered++;
      return 200;
    }
    if (answer && answer.status_code !== 401) {
      if (answer.status_code === 200) this.unanswered = 0;
      if (answer.status_code === 200 || answer.status_code === 404) return answer.status_code;
      throw new Error(
        `heartbeat refused: ${answer.status_code} ${answer.problem?.code ?? ''} ${answer.problem?.detail ?? ''}`,
      );
    }
    const res = await this.registry.POST('/providers/{providerID}/heartbeat', {
      params: { path: { providerID: id } },
      body: body as never,
    });
    if (res.response.status === 404) return 404;
    unwrap(res);
    return 200;
  }

  /** Attaches, then heartbeats until `stop()`, backing off while a service cannot be reached. */
  async run(): Promise<void> {
    const interval = durationMs(this.deps.config.heartbeat_interval);
    const maxBackoff = durationMs(this.deps.config.max_backoff);
    let failures = 0;
    while (!this.stopped) {
      try {
        if (!this.attached) await this.attach();
        await this.heartbeat();
        if (failures > 0) this.deps.logger.info({ after_failures: failures }, 'registry reachable again');
        failures = 0;
        await this.pause(interval);
      } catch (err) {
        failures++;
        const wait = Math.min(maxBackoff, 1000 * 2 ** Math.min(failures - 1, 16));
        this.deps.logger.warn({ err, failures, retry_in_ms: wait }, 'registry call failed; trying again');
        await this.pause(wait);
      }
    }
  }

  stop(): void {
    this.stopped = true;
    this.wake?.();
  }

  /**
   * Takes the machine out of the market as the daemon stops cleanly (SIGINT, SIGTERM; after `run()` returned): marks it
   * `offline` at the registry, which drops it from the offers at once and has billing end its running sessions as an
   * offline machine's are (billed to the last minute this daemon reported), instead of leaving it offered and rented
   * until the registry's offline bound (90 s) noticed the silence. A machine already out of the market (`offline`, or
   * in `maintenance`, an operator's decision its next start must not undo) is left as it is. Gives up after
   * `timeoutMs` (the registry unreachable: the offline bound takes it out then); whether the machine is out.
   */
  async leaveMarket(timeoutMs: number): Promise<boolean> {
    const id = this.providerId;
    if (!id) return false;
    const log = this.deps.logger;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    const leave = async () => {
      const record = unwrap(
        await this.registry.GET('/providers/{providerID}', { params: { path: { providerID: id } } }),
      );
      if (record.status === 'offline' || record.status === 'maintenance') return record.status;
      unwrap(
        await this.registry.PATCH('/providers/{providerID}/status', {
          params: { path: { providerID: id } },
          body: { status: 'offline' },
        }),
      );
      return record.status;
    };
    try {
      const before = await Promise.race([leave(), deadline]);
      if (before === 'offline' || before === 'maintenance') {
        log.info({ provider_id: id, status: before }, 'stopping: the machine is already off the market');
      } else {
        log.info(
          { provider_id: id, previous_status: before },
          'stopping: machine marked offline, off the market (its running sessions end)',
        );
      }
      return true;
    } catch (err) {
      log.warn(
        { provider_id: id, err: (err as Error).message },
        "stopping: could not mark the machine offline; the registry's offline bound takes it off the market",
      );
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  private pause(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.deps.sleep) return this.deps.sleep(ms);
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

type SpecLike = { model_name: string; vram: number; driver_version: string };
function gpusChanged(registered: readonly SpecLike[], read: readonly SpecLike[]): boolean {
  if (registered.length !== read.length) return true;
  return registered.some(
    (g, i) =>
      g.model_name !== read[i]!.model_name || g.vram !== read[i]!.vram || g.driver_version !== read[i]!.driver_version,
  );
}

/** What the daemon states of its machine (its registration and full update). */
interface MachineBody {
  owner_id: string;
  name: string;
  hostname: string;
  ip_address?: string;
  location?: string;
  disk_mb: number;
  metadata: Record<string, unknown>;
  gpus: ReturnType<typeof gpuSpec>[];
}

/** Whether the record says other than the daemon would state now (its configuration or its GPUs changed). */
function recordChanged(
  record: {
    name: string;
    hostname?: string | null;
    ip_address?: string | null;
    location?: string | null;
    disk_mb?: number | null;
    metadata?: unknown;
    gpus: Parameters<typeof gpusChanged>[0];
  },
  body: MachineBody,
): boolean {
  const same = (a: unknown, b: unknown) => isDeepStrictEqual(a ?? null, b ?? null);
  return (
    gpusChanged(record.gpus, body.gpus) ||
    record.name !== body.name ||
    !same(record.disk_mb, body.disk_mb) ||
    !same(record.hostname, body.hostname) ||
    !same(record.ip_address, body.ip_address) ||
    !same(record.location, body.location) ||
    // Key order apart (the registry stores it as jsonb).
    !same(record.metadata ?? {}, body.metadata)
  );
}
