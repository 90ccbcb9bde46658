import { Writable } from 'node:stream';
import type { DestinationStream } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type App, baseConfigSchema, createApp, createLogger, type Logger } from '../src/index.ts';

// Raw lines, not parsed ones: JSON.parse would hide a key written twice.
const raw: string[] = [];
const destination = new Writable({
  write(chunk, _enc, cb) {
    for (const line of String(chunk).split('\n')) if (line.trim()) raw.push(line);
    cb();
  },
}) as unknown as DestinationStream;
const parsed = () => raw.map((l) => JSON.parse(l) as Record<string, unknown>);
const keyCount = (line: string, key: string) => line.split(`"${key}":`).length - 1;

let logger: Logger;
let app: App;

/** Domain code: knows nothing of requests and logs through the process-wide logger. */
async function registerUser(log: Logger, name: string) {
  await new Promise((r) => setTimeout(r, 5));
  log.info({ name }, 'user registered');
  log.child({ module: 'accounts' }).info('child of the process logger');
}

beforeAll(async () => {
  logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination });
  app = await createApp({ service: 'test-service', description: 'test', config: baseConfigSchema.parse({}), logger });
  app.post('/users', { schema: { body: z.object({ name: z.string() }) } }, async (request) => {
    await registerUser(logger, request.body.name);
    request.log.info('through the request logger');
    return { ok: true };
  });
  await app.ready();
});

afterAll(async () => {
  await app.close();
});

describe('log lines written during a request', () => {
  it('carry the request and correlation IDs when written through the process-wide logger', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'ada' },
      headers: { 'x-request-id': 'req-ctx-1', 'x-correlation-id': 'corr-ctx-1' },
    });
    expect(res.statusCode).toBe(200);
    const registered = parsed().find((l) => l.msg === 'user registered');
    expect(registered).toMatchObject({ request_id: 'req-ctx-1', correlation_id: 'corr-ctx-1', name: 'ada' });
    const child = parsed().find((l) => l.msg === 'child of the process logger');
    expect(child).toMatchObject({ request_id: 'req-ctx-1', correlation_id: 'corr-ctx-1', module: 'accounts' });
  });

  it('write each ID once on lines of the request logger', async () => {
    await app.inject({
      method: 'POST',
      url: '/users',
      payload: { name: 'bob' },
      headers: { 'x-request-id': 'req-ctx-2' },
    });
    const lines = raw.filter((l) => l.includes('"req-ctx-2"'));
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(
      expect.arrayContaining([
        'incoming request',
        'user registered',
        'through the request logger',
        'request completed',
      ]),
    );
    for (const line of lines) {
      expect(keyCount(line, 'request_id')).toBe(1);
      expect(keyCount(line, 'correlation_id')).toBe(1);
    }
  });

  it('are the only ones that do: a line outside any request has no IDs', async () => {
    await app.inject({ method: 'POST', url: '/users', payload: { name: 'cy' } });
    logger.info('between requests');
    await registerUser(logger, 'outside');
    for (const msg of ['between requests', 'user registered']) {
      const line = parsed().findLast((l) => l.msg === msg);
      expect(line).toBeDefined();
      expect(line).not.toHaveProperty('request_id');
      expect(line).not.toHaveProperty('correlation_id');
    }
  });
});
