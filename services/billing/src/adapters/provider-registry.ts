/**
 * The provider registry as billing's `ProviderDirectory`: `GET /providers/{id}` with billing's own machine token
 * (client credentials at the auth service), through the platform's typed client (correlation ID, a time limit per
 * attempt, bounded retries). Owners are remembered for `cacheTtlMs` (a machine changes owner only by an admin's
 * hand). An unreachable or failing registry is a 503 PROVIDER_REGISTRY_UNAVAILABLE, never a hang or a 500.
 */
import { lazyClientCredentials, registryClient, type TokenSource } from '@gpu/client';
import { AppError, durationMs } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import { BoundedCache } from '../domain/bounded-cache.ts';
import type { ProviderDirectory, ProviderRecord } from '../domain/provider-directory.ts';
import { billingErrors } from '../errors.ts';

interface RegistryDirectoryOptions {
  url: string;
  authUrl: string;
  /** billing's machine client; `credentialsFile` is read when the first token is needed. */
  clientId?: string;
  clientSecret?: string;
  credentialsFile?: string;
  timeoutMs: number;
  cacheTtlMs: number;
  /** For tests: where tokens come from instead of client credentials. */
  token?: TokenSource;
}

/** billing's machine token for the registry, made on first use; a failure to get one is a 503 (retry later). */
function lazyTokens(opts: RegistryDirectoryOptions): TokenSource {
  const source = lazyClientCredentials(opts);
  return {
    async get() {
      try {
        return await source.get();
      } catch (err) {
        throw billingErrors.registryUnavailable(
          `billing could not get a token for the provider registry: ${(err as Error).message}`,
          err,
        );
      }
    },
    invalidate: () => source.invalidate?.(),
  };
}

/** billing's machine token as `provider_registry` configures its client (for the registry and the auth service). */
export function configuredTokens(config: BillingConfig['provider_registry']): TokenSource {
  return lazyTokens(registryOptions(config));
}

/** The options of `provider_registry`'s client. */
function registryOptions(config: BillingConfig['provider_registry']): RegistryDirectoryOptions {
  return {
    url: config.url,
    authUrl: config.auth_url,
    clientId: config.client_id || undefined,
    clientSecret: config.client_secret || undefined,
    credentialsFile: config.credentials_file || undefined,
    timeoutMs: durationMs(config.timeout),
    cacheTtlMs: durationMs(config.cache_ttl),
  };
}

function registryDirectory(opts: RegistryDirectoryOptions): ProviderDirectory {
  const client = registryClient({
    baseUrl: opts.url,
    token: opts.token ?? lazyTokens(opts),
    timeoutMs: opts.timeoutMs,
    retries: 2,
  });
  const owners = new BoundedCache<{ owner: string; until: number }>(100_000);
  const fetchRecord = async (providerId: string, correlationId?: string): Promise<ProviderRecord | null> => {
    const result = await client
      .GET('/providers/{providerID}', {
        params: { path: { providerID: providerId } },
        headers: correlationId ? { 'x-correlation-id': correlationId } : {},
      })
      .catch(unreachable);
    if (result.response.status === 404) return null;
    if (!result.data) throw registryAnswered(result);
    const p = result.data;
    owners.set(providerId, { owner: p.owner_id, until: Date.now() + opts.cacheTtlMs });
    return {
      id: p.id,
      ownerId: p.owner_id,
      status: p.status,
      gpus: p.gpus.map((g) => ({
        model: g.model_name,
        vramMb: Number(g.vram),
        powerW: g.power_consumption ?? null,
        healthy: g.is_healthy,
      })),
      // A registry from before per-GPU leases does not say: any group may be rented.
      minGpusPerRental: (p as { min_gpus_per_rental?: number }).min_gpus_per_rental ?? 1,
      // A registry from before the owner's hold does not say: not held.
      held: (p as { held?: boolean }).held ?? false,
      // A registry from before daemon bindings does not say: bound to none.
      daemonClientId: p.daemon_client_id ?? null,
    };
  };
  return {
    async ownerOf(providerId, correlationId) {
      const hit = owners.get(providerId);
      if (hit && hit.until > Date.now()) return hit.owner;
      return (await fetchRecord(providerId, correlationId))?.ownerId ?? null;
    },
    provider: fetchRecord,
    async offers(q) {
      const query = {
        sort: 'price' as const,
        limit: q.limit,
        ...(q.minFreeGpus !== undefined ? { min_free_gpus: q.minFreeGpus } : {}),
        ...(q.minGpus !== undefined ? { min_gpus: q.minGpus } : {}),
        ...(q.availability !== undefined ? { availability: q.availability } : {}),
        ...(q.gpuModel !== undefined ? { gpu_model: q.gpuModel } : {}),
        ...(q.minVramMb !== undefined ? { min_vram: q.minVramMb } : {}),
        ...(q.maxPrice !== undefined ? { max_price: q.maxPrice } : {}),
        ...(q.maxBid !== undefined ? { max_bid: q.maxBid } : {}),
        ...(q.minReliability !== undefined ? { min_reliability: q.minReliability } : {}),
        ...(q.region !== undefined ? { region: q.region } : {}),
      };
      const result = await client.GET('/offers', { params: { query: query as never } }).catch(unreachable);
      if (!result.data) throw searchAnswered(result);
      return result.data.map((o) => ({
        providerId: o.provider_id,
        modelKey: o.model_key,
        freeGpus: o.free_gpus,
        vramMb: o.vram_mb,
        pricePerGpuHour: o.price_per_gpu_hour,
        reliability: o.reliability.score,
        interruptible: o.interruptible
          ? {
              bidFloor: o.interruptible.bid_floor,
              gpus: o.interruptible.gpus,
              outbidAbove: o.interruptible.outbid_above,
            }
          : null,
      }));
    },
    async anyMachineHas(q) {
      // The market's groups as the placer searches them (the same model key, VRAM and count), free or not.
      const query = {
        availability: 'any' as const,
        limit: 1,
        min_gpus: q.minGpus,
        ...(q.gpuModel !== undefined ? { gpu_model: q.gpuModel } : {}),
        ...(q.minVramMb !== undefined ? { min_vram: q.minVramMb } : {}),
      };
      const result = await client.GET('/offers', { params: { query: query as never } }).catch(unreachable);
      if (!result.data) throw searchAnswered(result);
      return result.data.length > 0;
    },
  };
}

/** The registry not reached (its token source's own 503 passed on as it is): 503. */
function unreachable(err: unknown): never {
  if ((err as { code?: string }).code === 'PROVIDER_REGISTRY_UNAVAILABLE') throw err;
  throw billingErrors.registryUnavailable(`the provider registry is unreachable: ${(err as Error).message}`, err);
}

type RegistryAnswer = { response: Response; error?: unknown };

/** A registry answer without the body asked for: 503, naming what it said. */
function registryAnswered(result: RegistryAnswer) {
  const problem = (result.error ?? {}) as { code?: string; detail?: string };
  return billingErrors.registryUnavailable(
    `the provider registry answered ${result.response.status} ${problem.code ?? ''}: ${problem.detail ?? ''}`.trim(),
  );
}

/** The same for a market search, but 400 when it refused the search (terms it cannot take: waiting mends nothing). */
function searchAnswered(result: RegistryAnswer) {
  if (result.response.status !== 400) return registryAnswered(result);
  const problem = (result.error ?? {}) as { code?: string; detail?: string };
  return new AppError(
    'invalid',
    'MARKET_QUERY_REFUSED',
    `the provider registry refused the terms: ${problem.code ?? ''} ${problem.detail ?? ''}`.trim(),
  );
}

/** The registry configured in `provider_registry`, or null when its URL is empty. */
export function configuredDirectory(config: BillingConfig['provider_registry']): ProviderDirectory | null {
  if (!config.url) return null;
  return registryDirectory(registryOptions(config));
}
