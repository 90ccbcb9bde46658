/**
 * The message bus: one schema and one handler per kind, whichever transport brings the message. Dispatch by kind, a
 * kind nobody handles ignored, a body its kind's schema refuses malformed (never handed over), a handler's `term`
 * unapplicable and its throw the transport's to retry; the HTTP inbox over the same bus refuses malformed bodies with
 * a 400 naming the field and answers a handled one 200.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { baseConfigSchema, createApp, createLogger, inboxRoute, MessageBus, onMessage } from '../src/index.ts';
import { schemaRegistry } from '../src/openapi/route-docs.ts';
import { startTestIssuer } from '../src/testing/index.ts';

const seen: string[] = [];
const bus = () =>
  new MessageBus([
    onMessage({
      kind: 'thing.made',
      schema: z.object({ kind: z.literal('thing.made'), id: z.uuid() }),
      handle: async (m, meta) => {
        if (m.id === '00000000-0000-4000-8000-000000000000') return 'term';
        if (m.id === '00000000-0000-4000-8000-00000000000f') throw new Error('the database is away');
        seen.push(`${m.id} ${meta.correlationId ?? ''}`);
      },
    }),
  ]);

describe('the message bus', () => {
  it('hands each message to its kind, ignores kinds nobody takes, and never hands over a malformed one', async () => {
    const b = bus();
    const id = crypto.randomUUID();
    expect(await b.deliver({ kind: 'thing.made', id, extra: 1 }, { correlationId: 'c-1' })).toEqual({
      outcome: 'applied',
      kind: 'thing.made',
    });
    expect(seen).toContain(`${id} c-1`);
    expect(await b.deliver({ kind: 'thing.sold', id })).toEqual({ outcome: 'ignored', kind: 'thing.sold' });
    expect((await b.deliver({ kind: 'thing.made', id: 'nope' })).outcome).toBe('malformed');
    expect((await b.deliver({ id })).outcome).toBe('malformed');
    expect((await b.deliver('text')).outcome).toBe('malformed');
    expect(await b.deliver({ kind: 'thing.made', id: '00000000-0000-4000-8000-000000000000' })).toEqual({
      outcome: 'unapplicable',
      kind: 'thing.made',
    });
    await expect(b.deliver({ kind: 'thing.made', id: '00000000-0000-4000-8000-00000000000f' })).rejects.toThrow(
      'the database is away',
    );
    expect(() => new MessageBus([...bus()['byKind'].values(), ...bus()['byKind'].values()])).toThrow(/two handlers/);
  });

  it('over HTTP: 200 for a handled message, 400 naming the field for a malformed one, 5xx for a failure', async () => {
    const issuer = await startTestIssuer();
    const logger = createLogger({ service: 't', instanceId: 'i', level: 'silent' });
    const config = baseConfigSchema.parse({ access: issuer.accessConfig });
    const app = await createApp({ service: 'bus-test', description: 't', config, logger });
    try {
      inboxRoute(app, { bus: bus(), roles: ['service'], schemas: schemaRegistry() });
      await app.ready();
      const service = (await issuer.client('service')).headers;
      const post = (payload: object, headers = service) =>
        app.inject({ method: 'POST', url: '/messages', payload, headers });
      // Only the roles given post.
      const renter = (await issuer.user(['renter'])).headers;
      expect((await post({ kind: 'thing.made', id: crypto.randomUUID() }, renter)).statusCode).toBe(403);
      const ok = await post({ event_id: 'e', kind: 'thing.made', id: crypto.randomUUID(), newer_field: true });
      expect(ok.statusCode, ok.body).toBe(200);
      expect(ok.json()).toEqual({ kind: 'thing.made', outcome: 'applied' });
      const bad = await post({ kind: 'thing.made', id: 'nope' });
      expect(bad.statusCode).toBe(400);
      expect(bad.json().errors[0].path).toBe('body.id');
      expect((await post({ kind: 'thing.sold', id: crypto.randomUUID() })).statusCode).toBe(400);
      const gone = await post({ kind: 'thing.made', id: '00000000-0000-4000-8000-000000000000' });
      expect(gone.json()).toEqual({ kind: 'thing.made', outcome: 'unapplicable' });
      expect((await post({ kind: 'thing.made', id: '00000000-0000-4000-8000-00000000000f' })).statusCode).toBe(500);
    } finally {
      await app.close();
      await issuer.close();
    }
  });
});
