/**
 * The document says what the service enforces (`requestSchemaDrift` in `@gpu/common/testing`): every value generated
 * from a documented request field's schema (its bounds and their neighbours, samples of its pattern, awkward text) is
 * refused with a 400 naming the field exactly when the document refuses it. Bucket names, keys (their pattern, their
 * bytes, the store's segment limit), listing prefixes, URL lifetimes and content types among them.
 */
import { requestSchemaDrift } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from './helpers.ts';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(() => svc?.close());

describe('the request schemas of openapi.json', () => {
  it('refuse exactly what the service refuses, field by field', { timeout: 300_000 }, async () => {
    const service = (await svc.issuer.client('service')).headers;
    const drift = await requestSchemaDrift({
      app: svc.app,
      callers: [svc.auth, service],
      skipFields: {
        'querystring.cursor': 'opaque: only a cursor a page answered is one (400 INVALID_CURSOR)',
      },
    });
    expect(drift).toEqual([]);
  });
});
