/**
 * GET /health: 200 {"status":"UP"} when the service and its required dependencies work, 503 {"status":"DOWN"} naming
 * the failing dependency (what an operator and a monitor read).
 *
 * GET /health/ready: the same answer for the dependencies every request needs (the service names them: its database,
 * its object store): whether this instance should get traffic. A dependency whose outage the service rides out (NATS:
 * events wait in the outbox, daemons fall back to HTTP) makes `/health` 503 and leaves `/health/ready` 200, so a
 * readiness probe does not take every instance out when it goes, and with them the HTTP path the platform falls back on.
 *
 * GET /health/live: 200 whenever the process answers at all, touching no dependency (a liveness probe's): a database
 * that hangs takes instances out of traffic (`/ready`), it does not get every one of them restarted at once.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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
    opts: {
      path: string;
      service: string;
      instanceId: string;
      version: string;
      checks: Record<string, HealthCheck>;
      /** The checks `<path>/ready` runs (those every request needs); absent: all of them. */
      ready?: string[];
    },
  ) => {
    const started = Date.now();
    /** The health answer of the named checks. */
    const answer = (names: string[]) => async (_request: FastifyRequest, reply: FastifyReply) => {
      const present = names.filter((n) => opts.checks[n]);
      const results = await Promise.all(present.map((n) => runCheck(opts.checks[n] as HealthCheck)));
      const checks = Object.fromEntries(present.map((n, i) => [n, results[i]!]));
      const up = results.every((r) => r.status === 'UP');
      return reply.code(up ? 200 : 503).send({
        status: up ? 'UP' : 'DOWN',
        service: opts.service,
        instance_id: opts.instanceId,
        version: opts.version,
        uptime_seconds: Math.round((Date.now() - started) / 1000),
        checks,
      });
    };
    // The gateway answers `/health` for itself (and a service's as `/health/<service>`, for operators): these are
    // reached at the service, by probes and Consul.
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
        config: { openapi: { internal: true } },
      },
      answer(Object.keys(opts.checks)),
    );
    app.get(
      `${opts.path}/ready`,
      {
        schema: {
          tags: ['health'],
          summary: 'Whether this instance can serve requests: the dependencies every request needs',
          description:
            'For a load balancer or a readiness probe: 503 while a dependency every request needs is down (the ' +
            "service's database); one whose outage the service rides out (NATS: events wait in the outbox) is in " +
            '`/health` only.',
          operationId: 'getReadiness',
          response: { 200: healthSchema, 503: healthSchema },
        },
        logLevel: 'warn',
        config: { openapi: { internal: true } },
      },
      answer(opts.ready ?? Object.keys(opts.checks)),
    );
    app.get(
      `${opts.path}/live`,
      {
        schema: {
          tags: ['health'],
          summary: 'Whether this instance answers at all: no dependency is checked',
          description:
            "For a liveness probe: 200 while the process serves requests, whatever its dependencies' state (those " +
            "are `/health/ready`'s), so an outage of the database does not get every instance restarted.",
          operationId: 'getLiveness',
          response: { 200: healthSchema },
        },
        logLevel: 'warn',
        config: { openapi: { internal: true } },
      },
      answer([]),
    );
  },
  { name: 'health' },
);
