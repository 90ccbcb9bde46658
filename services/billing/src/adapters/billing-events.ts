/**
 * Billing's events into common's transactional outbox (`Outbox`): each domain
 * event becomes one outbox row whose body is the outbox envelope (`event_id`,
 * `kind`, `occurred_at`) and the event's data in the same wire shapes as the
 * HTTP answers (wire/presenters.ts): a deposit's or payout's `transaction`,
 * a session's `session` and, once ended, its `billing_record`; the platform's price `card`, a machine's `rates`; the
 * GPUs held on a machine (`{provider_id, version, gpu_indices, bids}`); a machine's nudge (`{provider_id, session_id, change}`) under the kind `machine.<owner_id>.<provider_id>`, its own
 * subject.
 */
import { randomUUID } from 'node:crypto';
import type { Outbox } from '@gpu/common';
import { insertSessionEvent } from '../db/session-event-repository.ts';
import type { BillingEvent, BillingEvents } from '../domain/events.ts';
import { billingRecordJson, type PresentContext, sessionJson, transactionJson } from '../wire/presenters.ts';

/** The data of an event's body. */
function eventData(p: PresentContext, e: BillingEvent): object {
  switch (e.kind) {
    case 'deposit.rejected':
      return { wallet_id: e.walletId, signature: e.signature, reason: e.reason };
    case 'deposit.confirmed':
      return { transaction: transactionJson(e.transaction, p.scale), source_owner: e.sourceOwner, slot: e.slot };
    case 'session.started':
    case 'session.grace_period':
    case 'session.resumed':
    case 'session.low_balance':
    case 'workload.running':
      return { session: sessionJson(p, e.session) };
    case 'machine.sessions':
      return { provider_id: e.providerId, session_id: e.sessionId, change: e.change };
    case 'session.completed':
    case 'session.terminated':
      return { session: sessionJson(p, e.session), billing_record: billingRecordJson(e.billingRecord, p.scale) };
    case 'pricing.platform_rates':
      return {
        card: {
          occurred_at: e.card.at.toISOString(),
          base_rates: e.card.baseRates,
          vram_rate_per_gb_hour: e.card.vramRatePerGbHour,
          power_rate_per_watt_hour: e.card.powerRatePerWattHour,
          factors: e.card.factors,
        },
      };
    case 'pricing.provider_rates':
      return {
        provider_id: e.rates.providerId,
        rates: {
          occurred_at: e.rates.at.toISOString(),
          base_rates: e.rates.baseRates,
          vram_rate_per_gb_hour: e.rates.vramRatePerGbHour,
          power_rate_per_watt_hour: e.rates.powerRatePerWattHour,
          bid_floor: e.rates.bidFloor,
        },
      };
    case 'lease.held':
      return { provider_id: e.providerId, version: e.version, gpu_indices: e.gpuIndices, bids: e.bids };
    default:
      return { transaction: transactionJson(e.transaction, p.scale) };
  }
}

/**
 * Billing's events, recorded in `outbox` (nothing is recorded there when it is `Outbox.disabled`); a session's events
 * are also kept in `session_events` for its parties to read over HTTP (GET /billing/events), NATS or not, with the
 * same `event_id`, time and data as the message.
 */
export function outboxEvents(outbox: Outbox, p: PresentContext): BillingEvents {
  return {
    async record(db, event, correlationId) {
      const data = eventData(p, event);
      const id = randomUUID();
      const occurredAt =
        'session' in event
          ? await insertSessionEvent(db, {
              id,
              sessionId: event.session.id,
              userId: event.session.user_id,
              providerOwnerId: event.session.provider_owner_id,
              kind: event.kind,
              data,
            })
          : undefined;
      // A machine's nudge goes out on the machine's own subject: its kind names the machine and its owner.
      const kind =
        event.kind === 'machine.sessions' ? `machine.${event.ownerId ?? 'none'}.${event.providerId}` : event.kind;
      if (outbox.enabled) await outbox.record(db, [{ id, kind, data, occurredAt }], correlationId);
    },
  };
}
