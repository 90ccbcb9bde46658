/** Where billing asks about provider machines: the provider registry (adapters/provider-registry.ts). */

/** One GPU of a machine, as the registry records it. */
export interface ProviderGpu {
  /** The name the driver prints (`NVIDIA H100 80GB HBM3`). */
  model: string;
  vramMb: number;
  /** Maximum power in watts, when the machine reported it. */
  powerW: number | null;
  healthy: boolean;
}

/** A provider machine as the registry knows it now. */
export interface ProviderRecord {
  id: string;
  /** The user who owns the machine. */
  ownerId: string;
  /** `idle`, `busy`, `offline`, `maintenance` or `error`. */
  status: string;
  /** The machine's GPUs; a GPU's index in this list is how leases name it. */
  gpus: ProviderGpu[];
  /** The smallest group of GPUs a rental may take on the machine (the owner's setting; 1 by default). */
  minGpusPerRental: number;
  /** Held off the market by its owner (an explicit `busy`): no new rental starts on it. */
  held: boolean;
  /** The daemon client the machine is bound to (only it reports the machine's sessions); null: none. */
  daemonClientId: string | null;
}

/** What a job asks of the market (the registry's offer search). */
interface OfferQuery {
  /** Billing's model key or a driver's name (`H100`). */
  gpuModel?: string;
  /** At least this many free GPUs in the group (absent: any, with `availability: 'any'`). */
  minFreeGpus?: number;
  /** At least this many GPUs in the group, free or not. */
  minGpus?: number;
  /** `any`: groups with no GPU free now too (held at bids, busy). */
  availability?: 'any';
  minVramMb?: number;
  /** Tokens per GPU-hour. */
  maxPrice?: string;
  /** Machines that take bids, with a bid floor (tokens per GPU-hour) at most this. */
  maxBid?: string;
  minReliability?: number;
  region?: string;
  limit: number;
}

/** A group of free GPUs on an idle machine, priced as billing charges them now (the registry's `Offer`). */
export interface MarketOffer {
  providerId: string;
  /** Billing's model key of the group (what a rental of it names). */
  modelKey: string;
  freeGpus: number;
  vramMb: number;
  pricePerGpuHour: string;
  reliability: number;
  /**
   * The group at a bid (null: the machine takes none): its floor, the GPUs a bid could get now (free, and held by
   * bids), and the lowest bid holding one (a bid above it takes that session's GPUs; null: none held at a bid).
   */
  interruptible: { bidFloor: string; gpus: number; outbidAbove: string | null } | null;
}

export interface ProviderDirectory {
  /**
   * The user who owns the provider machine, or null when the registry does not know it (remembered for a while: a
   * machine changes owner only by an admin's hand). Throws an `unavailable` error (503) when it cannot be asked.
   */
  ownerOf(providerId: string, correlationId?: string): Promise<string | null>;
  /** The machine's record as of now (never cached), or null when the registry does not know it; 503 as above. */
  provider(providerId: string, correlationId?: string): Promise<ProviderRecord | null>;
  /** The market's offers that meet the query, cheapest first (one page); 503 as above. */
  offers(query: OfferQuery): Promise<MarketOffer[]>;
  /**
   * Whether any registered machine, whatever its status and free GPUs now, has `minGpus` GPUs of the model (its model
   * key, as offers match it) with at least `minVramMb` each, priced: what a job could ever be placed on; 503 as above.
   */
  anyMachineHas(q: { gpuModel?: string; minGpus: number; minVramMb?: number }): Promise<boolean>;
}
