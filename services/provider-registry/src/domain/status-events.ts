/**
 * Provider status events, through the platform's transactional outbox
 * (`Outbox` in `@gpu/common`). Every status change (registration, explicit
 * status, full update, heartbeat revival, offline sweep) records its event in
 * the statement that makes the change (`db/status-event-sql.ts`), so an event
 * exists exactly when its change committed; an `OutboxRelay` publishes the
 * rows on the status subject with `Nats-Msg-Id` = `event_id`. A "change" to
 * the same state is not an event. A provider's removal records a `provider.removed` event with its delete
 * (`status` null), so billing learns that the machine's sessions must end.
 *
 * The published body is the outbox's envelope (`event_id`, `kind`,
 * `occurred_at`) and the change: `type` (the kind again, the field the
 * registry's events have always carried), `provider_id`, `owner_id`,
 * `previous_status` (null at registration), `status`, `reason`.
 */
import { activeTraceContext, Outbox } from '@gpu/common';
import type { ProviderStatus } from './provider.ts';

/** The kind (and `type`) of every status event. */
export const STATUS_CHANGED = 'provider.status_changed';

/**
 * The kind (and `type`) of the event of a provider's removal (`DELETE /providers/{id}`), on the same subject: its
 * `status` is null, `previous_status` the status it had, `reason` `removed`. A removed machine never comes back (a
 * registration makes a new ID): billing ends every session still running on it.
 */
const PROVIDER_REMOVED = 'provider.removed';

/**
 * The kind (and `type`) of the event of a machine bound to another daemon client (`PUT /providers/{id}/daemon`, or a
 * daemon claiming a machine bound to none), on the same subject: `provider_id`, `owner_id` and `daemon_client_id`
 * (null: none), no status. Billing copies the binding onto the machine's running sessions, whose usage and workload
 * reports it then takes from that client.
 */
export const DAEMON_BOUND = 'provider.daemon_bound';

/** Why a provider's status changed; carried on the status event (`removed`: the removal event). */
type StatusChangeReason =
  | 'registered'
  | 'explicit'
  | 'update'
  | 'heartbeat'
  | 'offline_timeout'
  | 'session_started'
  | 'session_ended'
  | 'removed';

/** The kind of the events recorded for `reason`. */
export const eventKindOf = (reason: StatusChangeReason) => (reason === 'removed' ? PROVIDER_REMOVED : STATUS_CHANGED);

/**
 * The JSON body of a status event (or of a removal: `status` null) as published: the contract consumers read, kept
 * as a type though nothing here builds one through it.
 * @public
 */
export interface StatusEvent {
  event_id: string;
  kind: typeof STATUS_CHANGED | typeof PROVIDER_REMOVED;
  type: typeof STATUS_CHANGED | typeof PROVIDER_REMOVED;
  provider_id: string;
  owner_id: string;
  previous_status: ProviderStatus | null;
  status: ProviderStatus | null;
  reason: StatusChangeReason;
  occurred_at: string;
}

/**
 * How a status write records its events: the reason, and the correlation ID of the request (or, for heartbeats
 * written together, of each provider's request). Undefined where events are not recorded (no NATS configured).
 */
export interface EventRecording {
  reason: StatusChangeReason;
  correlation?: string | ReadonlyMap<string, string | undefined>;
  /**
   * The W3C trace context of the one request or message the write is for (tracing on and the trace kept), as JSON for
   * `outbox_events.trace_context`; none for a write of many callers at once (a batch of heartbeats).
   */
  trace?: string;
}

/**
 * The registry's outbox. Its events are written by the changing statements themselves rather than by
 * `Outbox.record`, so `written()` tells the relay in this process that some were (it publishes them shortly, after
 * their transaction committed, instead of at its next tick).
 */
export class StatusOutbox extends Outbox {
  private wake?: () => void;

  override onRecord(listener: () => void): void {
    super.onRecord(listener);
    this.wake = listener;
  }

  /** Call after a write that recorded events. */
  written(): void {
    this.wake?.();
  }

  /** The recording of a write of `reason`, or undefined when this outbox records nothing. */
  recording(reason: StatusChangeReason, correlation?: EventRecording['correlation']): EventRecording | undefined {
    if (!this.enabled) return undefined;
    const trace = typeof correlation === 'object' ? undefined : activeTraceContext();
    return { reason, correlation, ...(trace ? { trace: JSON.stringify(trace) } : {}) };
  }
}
