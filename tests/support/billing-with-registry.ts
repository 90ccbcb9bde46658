/**
 * The billing service as the platform runs it, for tests across services: it trusts the real auth service's keys
 * and asks the real provider registry who owns a machine and what it has, with a `service` machine client of auth.
 *
 *   const platform = useAuthAndRegistry();
 *   const billing = await billingWithRegistry(platform);   // in beforeAll; close() it in afterAll
 */
import { randomUUID } from 'node:crypto';
import { UNCHECKED_PRINCIPAL } from '@gpu/common';
import { createClient } from '../../services/auth/src/domain/clients.ts';
import { type BillingHarness, type SetupOptions, setupBilling } from '../../services/billing/test/support/setup.ts';
import type { AuthAndRegistry } from './auth-and-registry.ts';

export async function billingWithRegistry(
  platform: AuthAndRegistry,
  opts: { registryUrl?: string; timeout?: string; config?: Record<string, unknown> } & Omit<
    SetupOptions,
    'config'
  > = {},
): Promise<BillingHarness> {
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `billing-${randomUUID()}`,
    role: 'service',
  });
  const { registryUrl, timeout, config, ...setup } = opts;
  return setupBilling({
    ...setup,
    config: {
      ...config,
      access: {
        ...(config?.access as Record<string, unknown> | undefined),
        jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
        issuer: platform.auth.config.jwt.issuer,
        audience: platform.auth.config.jwt.audience,
      },
      provider_registry: {
        url: registryUrl ?? platform.registryUrl,
        auth_url: platform.authUrl,
        client_id: client.id,
        client_secret: secret,
        timeout: timeout ?? '3s',
      },
    },
  });
}
