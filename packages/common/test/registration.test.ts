import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  baseConfigSchema,
  baseEnvAliases,
  buildRegistration,
  createApp,
  createLogger,
  loadConfig,
  runService,
} from '../src/index.ts';
import { ConsulRecorder } from '../src/testing/index.ts';

const consul = new ConsulRecorder();
let consulAddress: string;

beforeAll(async () => {
  consulAddress = await consul.start();
});

afterAll(async () => {
  await consul.close();
});

describe('Consul registration', () => {
  it('checks the readiness route where the app mounts it (<server.health_path>/ready)', async () => {
    const config = baseConfigSchema.parse({
      instance_id: 'i-health',
      server: { host: '127.0.0.1', port: 0, health_path: '/healthz' },
      registry: { enabled: true, address: consulAddress },
    });
    const logger = createLogger({ service: 'test', instanceId: 'i-health', level: 'silent' });
    const app = await createApp({ service: 'test-service', description: 'test', config, logger });
    const running = await runService({ name: 'test-service', config, logger, app });
    try {
      const service = consul.services.get('test-service-i-health') as { Check?: { HTTP?: string } } | undefined;
      const checkUrl = service?.Check?.HTTP;
      expect(checkUrl).toBe(`http://127.0.0.1:${running.port}/healthz/ready`);
      // What Consul would see when it runs the check.
      const res = await fetch(checkUrl as string);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ status: 'UP', service: 'test-service' });
    } finally {
      await running.shutdown('test over');
    }
    expect(consul.services.has('test-service-i-health')).toBe(false);
  });

  it('registers and deregisters with the ACL token (registry.token, CONSUL_HTTP_TOKEN) an agent with ACLs asks for', async () => {
    const secured = new ConsulRecorder({ aclToken: 'consul-acl-token' });
    const address = await secured.start();
    try {
      const config = loadConfig({
        schema: baseConfigSchema,
        envPrefix: 'TEST',
        env: { CONSUL_ADDRESS: address, CONSUL_HTTP_TOKEN: 'consul-acl-token', HOST: '127.0.0.1', PORT: '0' },
        aliases: baseEnvAliases,
      });
      const logger = createLogger({ service: 'test', instanceId: 'acl', level: 'silent' });
      const app = await createApp({ service: 'acl-service', description: 'test', config, logger });
      const running = await runService({ name: 'acl-service', config, logger, app });
      expect(secured.services.has(`acl-service-${config.instance_id}`)).toBe(true);
      await running.shutdown('test over');
      expect(secured.services.size).toBe(0);
      expect(secured.calls.map((c) => c.token)).toEqual(['consul-acl-token', 'consul-acl-token']);
    } finally {
      await secured.close();
    }
  });

  it("stops start-up when an agent with ACLs refuses the service's token", async () => {
    const secured = new ConsulRecorder({ aclToken: 'consul-acl-token' });
    const address = await secured.start();
    try {
      const config = baseConfigSchema.parse({
        server: { host: '127.0.0.1', port: 0 },
        registry: { address, token: 'not-the-token' },
      });
      const logger = createLogger({ service: 'test', instanceId: 'acl', level: 'silent' });
      const app = await createApp({ service: 'acl-service', description: 'test', config, logger });
      await expect(runService({ name: 'acl-service', config, logger, app })).rejects.toThrow(
        /consul registration failed/,
      );
      await app.close();
      expect(secured.services.size).toBe(0);
    } finally {
      await secured.close();
    }
  });

  it('uses registry.registration.health_check_path whenever it is set', () => {
    const config = baseConfigSchema.parse({
      instance_id: 'i-2',
      server: { health_path: '/healthz' },
      registry: { registration: { health_check_path: '/status' } },
    });
    expect(buildRegistration(config, 'svc', 8080).checkUrl).toBe('http://127.0.0.1:8080/status');
    // Set to the route's default path on purpose, while the route moved: the setting still wins.
    const pinned = baseConfigSchema.parse({
      instance_id: 'i-4',
      server: { health_path: '/healthz' },
      registry: { registration: { health_check_path: '/health' } },
    });
    expect(buildRegistration(pinned, 'svc', 8080).checkUrl).toBe('http://127.0.0.1:8080/health');
    const defaults = baseConfigSchema.parse({ instance_id: 'i-3' });
    expect(buildRegistration(defaults, 'svc', 8080).checkUrl).toBe('http://127.0.0.1:8080/health/ready');
  });
});
