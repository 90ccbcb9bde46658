/**
 * The document says what the service enforces (`requestSchemaDrift` in `@gpu/common/testing`): every value generated
 * from a documented request field's schema (its bounds and their neighbours, samples of its pattern, awkward text) is
 * refused with a 400 naming the field exactly when the document refuses it. `min_gpus` (1 to 64), version filters
 * (dotted numbers), text that must not be blank, dates among them.
 */
import { requestSchemaDrift } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './helpers.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

describe('the request schemas of openapi.json', () => {
  it('refuse exactly what the service refuses, field by field', { timeout: 300_000 }, async () => {
    const service = (await h.issuer.client('service')).headers;
    const daemon = (await h.issuer.client('daemon', h.admin.id)).headers;
    const drift = await requestSchemaDrift({
      app: h.app,
      callers: [h.admin.headers, service, daemon],
      skip: {
        'POST /messages':
          "the inbox's body is one of several kinds' schemas, by `kind`: each kind is refused field by field in " +
          'gpu-holds.test.ts and offers.test.ts',
      },
      skipFields: {
        'querystring.cursor': 'opaque: only a cursor a page answered is one (400 INVALID_CURSOR)',
        'PUT /providers/{providerID} body.id': "a rule between the path and the body: the id must be the path's",
      },
    });
    expect(drift).toEqual([]);
  });
});
