/**
 * The kinds the registry's bus takes are the kinds billing's HTTP transport sends (common's `REGISTRY_MESSAGE_KINDS`):
 * a kind added on one side only would be lost without NATS, or sent to a registry that refuses it.
 */
import { createLogger, REGISTRY_MESSAGE_KINDS } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { billingMessages } from '../src/adapters/billing-messages.ts';

describe("the registry's bus of billing's messages", () => {
  it('takes exactly the kinds billing sends it over HTTP', () => {
    const bus = billingMessages({
      holds: {} as never,
      market: {} as never,
      logger: createLogger({ service: 't', instanceId: 'i', level: 'silent' }),
    });
    expect(bus.kinds().sort()).toEqual([...REGISTRY_MESSAGE_KINDS].sort());
  });
});
