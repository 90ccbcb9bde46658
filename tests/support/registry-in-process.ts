/**
 * Billing's reads of machines (`ProviderDirectory`) from a provider registry harness running in the same process,
 * through its routes as billing's HTTP client reads them: for tests that run both services without auth between
 * them. Offer searches are not read through it.
 */
import type { ProviderDirectory, ProviderRecord } from '../../services/billing/src/domain/provider-directory.ts';
import type { Harness } from '../../services/provider-registry/test/helpers.ts';

interface GpuJson {
  model_name: string;
  vram: number;
  power_consumption: number | null;
  is_healthy: boolean;
}

/** The directory over the harness `registry()` answers (read at each call: the harness may start after). */
export function registryInProcess(registry: () => Harness): ProviderDirectory {
  const provider = async (id: string): Promise<ProviderRecord | null> => {
    const res = await registry().app.inject({ url: `/providers/${id}` });
    if (res.statusCode === 404) return null;
    const p = res.json();
    return {
      id: p.id,
      ownerId: p.owner_id,
      status: p.status,
      gpus: (p.gpus as GpuJson[]).map((g) => ({
        model: g.model_name,
        vramMb: g.vram,
        powerW: g.power_consumption,
        healthy: g.is_healthy,
      })),
      minGpusPerRental: p.min_gpus_per_rental,
      held: p.held,
      daemonClientId: p.daemon_client_id ?? null,
    };
  };
  const unread = () => Promise.reject(new Error('offer searches are not read in process'));
  return {
    provider,
    ownerOf: async (id) => (await provider(id))?.ownerId ?? null,
    offers: unread,
    anyMachineHas: unread,
  };
}
