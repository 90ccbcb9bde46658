/**
 * Service registration in Consul with an HTTP health check, through the
 * `consul` client, with the ACL token `registry.token` when one is set. An
 * unspecified listen address (0.0.0.0, ::) is announced and checked as 127.0.0.1.
 */
import Consul from 'consul';
import type { Logger } from 'pino';
import type { BaseConfig } from '../config-schema.ts';
import { durationMs } from '../duration.ts';

export interface Registration {
  id: string;
  name: string;
  address: string;
  port: number;
  tags: string[];
  checkUrl: string;
}

const UNSPECIFIED = new Set(['0.0.0.0', '::', '[::]', '']);

/**
 * The path Consul's HTTP check calls: `registry.registration.health_check_path` when set (a different check
 * endpoint on purpose), else the readiness route the app mounts (`<server.health_path>/ready`), so moving the route
 * moves the check. Readiness, not `/health`: an outage the service rides out (NATS) must not take every instance out
 * of discovery.
 */
function checkPath(config: BaseConfig): string {
  return config.registry.registration.health_check_path || `${config.server.health_path}/ready`;
}

/** The registration this service announces, derived from its configuration. */
export function buildRegistration(config: BaseConfig, defaultName: string, port: number): Registration {
  const reg = config.registry.registration;
  const name = reg.service_name || defaultName;
  const host = reg.address || config.server.host;
  const address = UNSPECIFIED.has(host) ? '127.0.0.1' : host;
  const urlHost = address.includes(':') ? `[${address}]` : address;
  return {
    id: `${reg.id_prefix || name}-${config.instance_id}`,
    name,
    address,
    port,
    tags: reg.tags,
    checkUrl: `http://${urlHost}:${port}${checkPath(config)}`,
  };
}

function client(registry: BaseConfig['registry']): Consul {
  const { address, token } = registry;
  const url = new URL(address.includes('://') ? address : `http://${address}`);
  return new Consul({
    host: url.hostname,
    port: Number(url.port || (url.protocol === 'https:' ? 443 : 8500)),
    secure: url.protocol === 'https:',
    // An agent with ACLs on refuses registrations without a token allowed to write the service.
    ...(token ? { defaults: { token } } : {}),
  });
}

/** Registers the service; retried a few times so a slow agent does not stop start-up. */
export async function registerService(config: BaseConfig, registration: Registration, log: Logger): Promise<void> {
  const reg = config.registry.registration;
  const consul = client(config.registry);
  const body = {
    id: registration.id,
    name: registration.name,
    address: registration.address,
    port: registration.port,
    tags: registration.tags,
    check: {
      name: `${registration.name} HTTP health`,
      http: registration.checkUrl,
      interval: `${Math.max(1, Math.round(durationMs(reg.health_check_interval) / 1000))}s`,
      timeout: `${Math.max(1, Math.round(durationMs(reg.health_check_timeout) / 1000))}s`,
      deregistercriticalserviceafter: `${Math.max(1, Math.round(durationMs(reg.deregister_critical_after) / 1000))}s`,
    },
  };
  let lastError: unknown;
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      await consul.agent.service.register(body);
      log.info({ registry_id: registration.id, check: registration.checkUrl }, 'registered with consul');
      return;
    } catch (err) {
      lastError = err;
      log.warn({ err, attempt }, 'consul registration failed, retrying');
      await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
    }
  }
  throw new Error(`consul registration failed: ${(lastError as Error)?.message ?? lastError}`);
}

export async function deregisterService(config: BaseConfig, id: string, log: Logger): Promise<void> {
  try {
    await client(config.registry).agent.service.deregister(id);
    log.info({ registry_id: id }, 'deregistered from consul');
  } catch (err) {
    log.warn({ err, registry_id: id }, 'consul deregistration failed');
  }
}
