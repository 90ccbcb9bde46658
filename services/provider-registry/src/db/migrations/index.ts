/** Every migration of the provider registry, by name (applied in name order). */
import type { Migration } from 'kysely';
import * as createProviders from './20250101000000_create_providers.ts';
import * as providerModels from './20250102000000_provider_models.ts';
import * as gpuSpecJson from './20250103000000_gpu_spec_json.ts';
import * as statusLastSeenIndex from './20250104000000_status_last_seen_index.ts';
import * as outboxEvents from './20250105000000_outbox_events.ts';
import * as providerSessions from './20250106000000_provider_sessions.ts';
import * as reliability from './20250107000000_reliability.ts';
import * as offers from './20250108000000_offers.ts';
import * as gpuLeases from './20250109000000_gpu_leases.ts';
import * as providerLiveness from './20250110000000_provider_liveness.ts';
import * as ownerHold from './20250111000000_owner_hold.ts';
import * as leaseKinds from './20250112000000_lease_kinds.ts';
import * as outboxTraceContext from './20250113000000_outbox_trace_context.ts';
import * as daemonBinding from './20250114000000_daemon_binding.ts';
import * as gpuHolds from './20250115000000_gpu_holds.ts';
import * as offersVramPriceIndex from './20250116000000_offers_vram_price_index.ts';
import * as disk from './20250117000000_disk.ts';
import * as bids from './20250118000000_bids.ts';
import * as livenessHot from './20250119000000_liveness_hot.ts';
import * as gpusFillfactor from './20250120000000_gpus_fillfactor.ts';
import * as offerBidFloor from './20250121000000_offer_bid_floor.ts';
import * as asciiCaseFold from './20250122000000_ascii_case_fold.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_create_providers': createProviders,
  '20250102000000_provider_models': providerModels,
  '20250103000000_gpu_spec_json': gpuSpecJson,
  '20250104000000_status_last_seen_index': statusLastSeenIndex,
  '20250105000000_outbox_events': outboxEvents,
  '20250106000000_provider_sessions': providerSessions,
  '20250107000000_reliability': reliability,
  '20250108000000_offers': offers,
  '20250109000000_gpu_leases': gpuLeases,
  '20250110000000_provider_liveness': providerLiveness,
  '20250111000000_owner_hold': ownerHold,
  '20250112000000_lease_kinds': leaseKinds,
  '20250113000000_outbox_trace_context': outboxTraceContext,
  '20250114000000_daemon_binding': daemonBinding,
  '20250115000000_gpu_holds': gpuHolds,
  '20250116000000_offers_vram_price_index': offersVramPriceIndex,
  '20250117000000_disk': disk,
  '20250118000000_bids': bids,
  '20250119000000_liveness_hot': livenessHot,
  '20250120000000_gpus_fillfactor': gpusFillfactor,
  '20250121000000_offer_bid_floor': offerBidFloor,
  '20250122000000_ascii_case_fold': asciiCaseFold,
};
