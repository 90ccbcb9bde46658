/**
 * GET /health: 200 {"status":"UP"} when the service and its required
 * dependencies work, 503 {"status":"DOWN"} naming the failing dependency.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { z } from 'zod';

/**
 * A dependency check: resolves when the dependency works, rejects when it does not. Resolving with `{ detail }` adds a
 * word for operators to the check's answer without making it fail (billing's paused payouts).
 */
export type HealthCheck = () => Promise<unknown>;

const CHECK_TIMEOUT_MS = 3000;

/** The health answer (`components.schemas.Health` of every document). */
export const healthSchema = z.object({
  status: z.enum(['UP', 'DOWN']),
  service: z.string(),
  instance_id: z.string(),
  version: z.string(),
  uptime_seconds: z.number(),
  checks: z.record(
    z.string(),
    z.object({ status: z.enum(['UP', 'DOWN']), error: z.string().optional(), detail: z.string().optional() }),
  ),
});

async function runCheck(check: HealthCheck): Promise<{ status: 'UP' | 'DOWN'; error?: string; detail?: string }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const result = await Promise.race([
      check(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
      }),
    ]);
    const detail = (result as { detail?: unknown } | null | undefined)?.detail;
    return typeof detail === 'string' ? { status: 'UP', detail } : { status: 'UP' };
  } catch (err) {
    return { status: 'DOWN', error: (err as Error).message || String(err) };
  } finally {
    clearTimeout(timer);
  }
}

export const healthPlugin = fp(
  async (
    app: FastifyInstance,
    opts: { path: string; service: string; instanceId: string; version: string; checks: Record<string, HealthCheck> },
  ) => {
    const started = Date.now();
    app.get(
      opts.path,
      {
        schema: {
          tags: ['health'],
          summary: 'Service health with the state of each required dependency',
          operationId: 'getHealth',
          response: { 200: healthSchema, 503: healthSchema },
        },
        logLevel: 'warn',
        // The gateway answers `/health` for itself (and a service's as `/health/<service>`, for operators): this one is
        // reached at the service, by probes and Consul.
        config: { openapi: { internal: true } },
      },
      async (_request, reply) => {
        const names = Object.keys(opts.checks);
        const results = await Promise.all(names.map((n) => runCheck(opts.checks[n] as HealthCheck)));
        const checks = Object.fromEntries(names.map((n, i) => [n, results[i]!]));
        const up = results.every((r) => r.status === 'UP');
        return reply.code(up ? 200 : 503).send({
          status: up ? 'UP' : 'DOWN',
          service: opts.service,
          instance_id: opts.instanceId,
          version: opts.version,
          uptime_seconds: Math.round((Date.now() - started) / 1000),
          checks,
        });
      },
    );
  },
  { name: 'health' },
);
