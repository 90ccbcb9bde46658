/** Helpers for session tests: a settable clock, a renter and a provider, starting and ending sessions. */
import type { BillingHarness } from './setup.ts';

/** A clock tests move by hand. */
export function manualClock(start = Date.parse('2031-03-01T10:00:00.000Z')) {
  let t = start;
  return {
    now: () => new Date(t),
    advance(ms: number) {
      t += ms;
    },
  };
}

export const H100_X1 = {
  gpu_model: 'NVIDIA Tesla H100',
  gpu_count: 1,
  requested_vram_mb: 40960,
  estimated_power_w: 300,
}; // 4.00 + 40 GB × 0.02 + 300 W × 0.001 = 5.10/h

export const RTX4090_X2 = {
  gpu_model: 'NVIDIA GeForce RTX 4090',
  gpu_count: 2,
  requested_vram_mb: 24576,
  estimated_power_w: 450,
}; // 1.00 + 0.48 + 0.45 = 1.93/h

export async function parties(h: BillingHarness, funds: string) {
  const renter = await h.fundedWallet(funds, 'user');
  const provider = await h.fundedWallet('0', 'provider');
  return { renter, provider };
}

/** A renter's wallet held by the user `renterId` and a provider wallet held by the machine's owner `providerOwnerId`. */
export async function ownedParties(h: BillingHarness, funds: string, renterId: string, providerOwnerId: string) {
  const renter = await h.fundedWallet(funds, 'user', undefined, { ownerId: renterId });
  const provider = await h.fundedWallet('0', 'provider', undefined, { holderId: providerOwnerId });
  return { renter, provider };
}

export function startBody(
  p: Awaited<ReturnType<typeof parties>>,
  resources: Record<string, unknown> = H100_X1,
  jobId: string = crypto.randomUUID(),
) {
  return {
    user_id: p.renter.ownerId,
    wallet_id: p.renter.id,
    provider_id: p.provider.ownerId,
    job_id: jobId,
    ...resources,
  };
}

export const start = (h: BillingHarness, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  h.app.inject({ method: 'POST', url: '/api/v1/billing/start-session', payload: body, headers });

export const end = (h: BillingHarness, sessionId: string) =>
  h.app.inject({ method: 'POST', url: '/api/v1/billing/end-session', payload: { session_id: sessionId } });

export const usage = (h: BillingHarness, sessionId: string) =>
  h.app.inject({ method: 'GET', url: `/api/v1/billing/current-usage/${sessionId}` });
