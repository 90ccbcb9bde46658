/** Prometheus metrics: request counts and latency histograms by route and status. */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import { metricReadFailures } from '../db/metric-read.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** This service's metrics registry; services add their own metrics to it. */
    metrics: Registry;
  }
}

export const metricsPlugin = fp(
  async (app: FastifyInstance, opts: { service: string; expose: boolean }) => {
    const registry = new Registry();
    registry.setDefaultLabels({ service: opts.service });
    collectDefaultMetrics({ register: registry });
    // Every service's gauges read from its database count their failed reads here (db/metric-read.ts).
    registry.registerMetric(metricReadFailures);
    const requests = new Counter({
      name: 'http_requests_total',
      help: 'HTTP requests by method, route and status code',
      labelNames: ['method', 'route', 'status_code'] as const,
      registers: [registry],
    });
    const duration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request latency by method, route and status code',
      labelNames: ['method', 'route', 'status_code'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    });
    app.decorate('metrics', registry);
    // The labelled series of each (method, route, status), looked up once: prom-client hashes a label set
    // on every call otherwise. Bounded: routes are the registered patterns, never raw URLs.
    const series = new Map<string, { count: Counter.Internal; latency: Histogram.Internal<string> }>();
    app.addHook('onResponse', (request, reply, done) => {
      const route = request.routeOptions.url ?? 'unmatched';
      const status = String(reply.statusCode);
      const key = `${request.method} ${route} ${status}`;
      let s = series.get(key);
      if (!s) {
        s = {
          count: requests.labels(request.method, route, status),
          latency: duration.labels(request.method, route, status),
        };
        series.set(key, s);
      }
      s.count.inc();
      s.latency.observe(reply.elapsedTime / 1000);
      done();
    });
    if (opts.expose) {
      app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
        reply.type(registry.contentType);
        return registry.metrics();
      });
    }
  },
  { name: 'metrics' },
);
