/**
 * A renter of the real auth service renting a machine at billing, as the platform's renters do: a wallet of their
 * own with 100 tokens credited, and a session on `providerId` at 100 an hour (with `workload`, a workload session).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { registerAndLogin } from '../../services/auth/test/helpers.ts';
import { base58Encode } from '../../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../../services/billing/test/support/setup.ts';
import type { AuthAndRegistry } from './auth-and-registry.ts';

export async function rentAtBilling(
  platform: AuthAndRegistry,
  billing: BillingHarness,
  providerId: string,
  opts: { gpuCount?: number; workload?: object } = {},
): Promise<{ id: string; headers: Record<string, string> }> {
  const { user, tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await billing.app.inject({
    method: 'POST',
    url: '/api/v1/wallet',
    headers,
    payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
  });
  await billing.credit(wallet.json().id, '100');
  const started = await billing.app.inject({
    method: 'POST',
    url: '/api/v1/billing/start-session',
    headers,
    payload: {
      user_id: user.id,
      wallet_id: wallet.json().id,
      provider_id: providerId,
      job_id: randomUUID(),
      gpu_model: 'H100',
      gpu_count: opts.gpuCount ?? 1,
      requested_vram_mb: 0,
      estimated_power_w: 0,
      accepted_hourly_rate: '100',
      ...(opts.workload ? { workload: opts.workload } : {}),
    },
  });
  expect(started.statusCode, started.body).toBe(201);
  return { id: started.json().session.id as string, headers };
}
