/**
 * The words billing and the provider registry exchange, spelled once: a machine's statuses (the registry's), the end
 * reasons billing gives a session itself and which of them count against a machine, and the kinds of billing's
 * session events (running or ended) that the registry reads. Each service keeps the rules it applies to them.
 */

/** A provider's machine as the registry reports it. */
export const PROVIDER_STATUSES = ['idle', 'busy', 'offline', 'maintenance', 'error'] as const;
export type ProviderStatus = (typeof PROVIDER_STATUSES)[number];

/** Statuses in which a machine delivers no GPU time: billing ends its sessions. */
export const UNDELIVERING_STATUSES = ['offline', 'maintenance', 'error'] as const satisfies readonly ProviderStatus[];

/**
 * The end reasons billing gives a session itself: its renter's spend cap reached, funds run out, the provider side
 * ending its renter's session (`provider_ended`, whatever reason it gave), the machine gone offline, into maintenance
 * or error, or removed, an interruptible session's GPUs taken by a higher bid or an on-demand rental (`preempted`).
 * No party ending a session may claim one.
 */
export const PLATFORM_END_REASONS = [
  'spend_cap',
  'provider_ended',
  'insufficient_funds',
  'provider_offline',
  'provider_maintenance',
  'provider_error',
  'provider_removed',
  'workload_exited',
  'workload_failed',
  'workload_max_runtime',
  'workload_limit',
  'workload_stopped',
  'workload_not_started',
  'workload_lost',
  'preempted',
] as const;
export type PlatformEndReason = (typeof PLATFORM_END_REASONS)[number];

/** The end reasons that are the machine's fault: it went away under a running rental, or its owner ended it. */
export const PROVIDER_FAULT_END_REASONS = [
  'provider_ended',
  'provider_offline',
  'provider_error',
  'provider_maintenance',
  'provider_removed',
  'workload_not_started',
  'workload_lost',
] as const satisfies readonly PlatformEndReason[];

/**
 * The end reasons billing gives a session when its machine stopped delivering (the registry's verdict: offline, in
 * maintenance or error; or the machine removed): nothing on that machine may report the session's end any more.
 */
export const UNDELIVERED_END_REASONS = [
  'provider_offline',
  'provider_maintenance',
  'provider_error',
  'provider_removed',
] as const satisfies readonly PlatformEndReason[];

/** Billing's events of a session that runs (and holds its GPUs). */
export const SESSION_RUNNING_EVENT_KINDS = [
  'session.started',
  'session.grace_period',
  'session.resumed',
  'session.low_balance',
] as const;

/** Billing's events of a session's end. */
export const SESSION_ENDED_EVENT_KINDS = ['session.completed', 'session.terminated'] as const;

/**
 * Billing's statement of the GPUs its leases (rentals and reservations) hold on a machine, with a version that grows
 * with each statement of the machine: the provider registry keeps the newest, so its market shows billing's leases.
 */
export const GPUS_HELD_EVENT_KIND = 'lease.held';

/**
 * The kinds of billing's events the provider registry takes (its message bus: over NATS from billing's stream, or
 * posted to its inbox by billing's outbox when billing runs without NATS): held GPUs, rentals' ends, prices.
 */
export const REGISTRY_MESSAGE_KINDS = [
  GPUS_HELD_EVENT_KIND,
  'session.completed',
  'session.terminated',
  'pricing.platform_rates',
  'pricing.provider_rates',
] as const;
