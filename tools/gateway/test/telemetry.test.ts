/**
 * The gateway in the trace, through each engine of the platform's that runs here: the Node gateway (in this process,
 * as `pnpm start` builds it), and nginx on deploy/gateway's files as `pnpm start` and docker-compose run it, with its
 * telemetry receiver in this process. A caller's request is a server span of the gateway's, under the caller's span,
 * and the service's span is under the gateway's (the Node gateway's call, a client span, in between); which traces
 * are kept is the platform's fraction, drawn by the gateway for each request and followed by the service, whatever
 * flag, trace ID or randomness the caller sent; every log line the gateway writes for a request names the request's
 * trace and span.
 * Tracing is on in this process (fraction 0.5), with the SDK's in-memory exporter; the service is the real auth
 * service.
 */
import { createSocket } from 'node:dgram';
import { get } from 'node:http';
import { Writable } from 'node:stream';
import { startTracing } from '@gpu/common';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import type { FastifyInstance } from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { useAuth } from '../../../services/auth/test/helpers.ts';
import { buildGateway } from '../src/gateway.ts';
import { LineIds } from '../src/nginx-telemetry.ts';
import { type RunningGateway, startComposeNginx, startPlatformNginxGateway, startReceiver } from './gateways.ts';

// Before any app is built: their server spans are made as they are registered. The receiver's spans take nginx's IDs.
const exporter = new InMemorySpanExporter();
const ids = new LineIds();
const tracing = await startTracing({
  service: 'gateway-test',
  exporter,
  idGenerator: ids,
  env: { OTEL_TRACES_SAMPLER_ARG: '0.5' },
});
const auth = useAuth();
afterAll(async () => {
  await tracing?.shutdown();
});

const CALLER_SPAN = 'b7ad6b7169203331';

/** The Node gateway as `pnpm start` builds it, in this process (its spans in this process's exporter). */
async function nodeGateway(logStream: Writable): Promise<RunningGateway> {
  const url = await authUrl();
  const app: FastifyInstance = await buildGateway({
    upstreams: { auth: url, storage: url, 'provider-registry': url, billing: url },
    logStream,
  });
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  return { base, pids: () => [process.pid], stop: () => app.close() };
}

let listening: string | undefined;
async function authUrl(): Promise<string> {
  listening ??= await auth.app.listen({ host: '127.0.0.1', port: 0 });
  return listening;
}

const engines: { name: string; start: (logs: Writable) => Promise<RunningGateway>; logs: boolean }[] = [
  { name: "pnpm start's gateway (@fastify/http-proxy)", start: nodeGateway, logs: true },
  {
    name: "docker-compose's nginx (deploy/gateway)",
    start: async () => startComposeNginx({ auth: await authUrl() }, { ids }),
    logs: false,
  },
  {
    name: "pnpm start's nginx (deploy/gateway, tools/gateway/src/nginx.ts)",
    start: async () => startPlatformNginxGateway({ auth: await authUrl() }, { ids }),
    logs: false,
  },
];

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const spanIdOf = (s: ReadableSpan) => s.spanContext().spanId;

describe.each(engines)('the gateway in the trace: $name', (engine) => {
  it("makes a span under the caller's, the service's under it; keeps what the gateway draws, whatever the caller sent", async () => {
    const lines: Record<string, unknown>[] = [];
    const logs = new Writable({
      write(chunk, _enc, cb) {
        for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
        cb();
      },
    });
    const gateway = await engine.start(logs);
    try {
      // node:http, not fetch: this process traces, and its fetch would send a traceparent of its own besides.
      const call = (headers: Record<string, string>) =>
        new Promise<{ status: number }>((resolve, reject) => {
          get(`${gateway.base}/.well-known/jwks.json`, { headers }, (res) => {
            res.resume();
            res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
          }).on('error', reject);
        });
      // 40 callers doing all they can to have their requests kept: trace IDs the trace ID rule keeps at 0.5 (fresh
      // ones per engine), "sampled", and the highest randomness in their tracestate.
      const prefix = String(engines.indexOf(engine) + 1).padStart(4, '0');
      const ids = Array.from({ length: 40 }, (_, i) => prefix + (i + 1).toString(16).padStart(28, '0'));
      for (const id of ids) {
        const sent = { traceparent: `00-${id}-${CALLER_SPAN}-01`, tracestate: 'ot=rv:ffffffffffffff' };
        expect((await call(sent)).status).toBe(200);
      }
      // A caller with no trace (or a malformed one) gets a trace the gateway begins.
      expect((await call({ traceparent: '00-not-a-trace' })).status).toBe(200);

      const ofTrace = (traceId: string) =>
        exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
      const gatewaySpans = (traceId: string) =>
        ofTrace(traceId).filter((s) => s.instrumentationScope.name === 'gateway' && s.kind === 1 /* SERVER */);
      const serviceSpans = (traceId: string) =>
        ofTrace(traceId).filter((s) => s.instrumentationScope.name === 'auth-service');
      // The service's spans are made before it answers; nginx's from its lines, a moment after the answer. The
      // gateway and the service keep the same requests, by the gateway's draw: some, not all (all 40 or none at 0.5:
      // once in 2^39 runs), whatever the callers sent.
      const keptBy = (spans: (id: string) => ReadableSpan[]) => ids.filter((id) => spans(id).length > 0);
      const kept = keptBy(serviceSpans);
      expect(kept.length).toBeGreaterThan(0);
      expect(kept.length).toBeLessThan(ids.length);
      await expect.poll(() => keptBy(gatewaySpans), { timeout: 10_000 }).toEqual(kept);
      for (const id of kept) expect(gatewaySpans(id)).toHaveLength(1);

      const traceId = kept[0]!;
      const span = gatewaySpans(traceId)[0]!;
      expect(span.name).toBe('GET /.well-known/jwks.json');
      expect(parentOf(span)).toBe(CALLER_SPAN);
      expect(span.attributes['http.response.status_code']).toBe(200);
      expect(span.attributes.request_id).toEqual(expect.any(String));
      // The service's span is under the gateway's: straight under it (nginx), or under its call (the Node gateway).
      const service = serviceSpans(traceId)[0];
      expect(service?.name).toBe('GET /.well-known/jwks.json');
      const above = ofTrace(traceId).find((s) => spanIdOf(s) === parentOf(service!))!;
      if (above.kind === 2 /* CLIENT */) expect(parentOf(above)).toBe(spanIdOf(span));
      else expect(spanIdOf(above)).toBe(spanIdOf(span));

      // The gateway's log lines for the kept request name its trace and its span (the Node gateway logs each request;
      // nginx's access log lines carry the same, checked in gateway.test.ts).
      if (engine.logs) {
        const mine = lines.filter((l) => l.trace_id === traceId);
        expect(mine.map((l) => l.msg)).toEqual(expect.arrayContaining(['incoming request', 'request completed']));
        for (const l of mine) expect(l.span_id).toBe(spanIdOf(span));
        // Every line written for a request names a trace.
        for (const l of lines.filter((l) => l.reqId)) expect(l.trace_id, String(l.msg)).toEqual(expect.any(String));
      }
    } finally {
      await gateway.stop();
    }
  });
});

describe("nginx's telemetry receiver", () => {
  it('counts only what reads as a line of nginx, and names no upstream nginx does not have', async () => {
    const receiver = await startReceiver();
    const socket = createSocket('udp4');
    try {
      const send = (text: string) =>
        new Promise<void>((resolve, reject) =>
          socket.send(text, receiver.syslogPort, '127.0.0.1', (err) => (err ? reject(err) : resolve())),
        );
      const line = (over: Record<string, unknown>) =>
        `<190>Nov 26 08:00:00 gateway: ${JSON.stringify({
          trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
          span_id: '00f067aa0ba902b7',
          parent_span_id: '',
          request_id: 'r-1',
          method: 'GET',
          path: '/somewhere',
          status: 200,
          request_time: 0.002,
          msec: Date.now() / 1000,
          proxied: '',
          ...over,
        })}`;
      // Noise, a status no HTTP answer has, an upstream nginx has not: none makes a series of its own.
      await send('not a line at all');
      await send(line({ status: 12345 }));
      await send(line({ proxied: 'anything-a-sender-likes' }));
      await send(line({ proxied: 'object-store', status: 206 }));
      const text = async () => (await fetch(`${receiver.metricsAt}/metrics`)).text();
      await expect.poll(text, { timeout: 10_000 }).toContain('status_code="206"');
      const series = (await text()).split('\n').filter((l) => l.startsWith('gateway_requests_total{'));
      expect(series.sort()).toEqual(
        [
          'gateway_requests_total{upstream="gateway",method="GET",route="unmatched",status_code="200"} 1',
          'gateway_requests_total{upstream="object-store",method="GET",route="unmatched",status_code="206"} 1',
        ].sort(),
      );
    } finally {
      socket.close();
      await receiver.close();
    }
  });
});
