import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from './helpers.ts';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(() => svc.close());

interface Operation {
  requestBody?: { content: Record<string, { schema: Record<string, unknown> }> };
  responses: Record<string, { $ref?: string; content?: Record<string, { schema: Record<string, unknown> }> }>;
}
type Paths = Record<string, Record<string, Operation>>;

const OBJECT_PATHS = ['/objects/{bucketName}/{objectKey}', '/objects/{objectKey}'];
const LIST_PATHS = ['/objects/{bucketName}/list', '/objects/list'];

async function document(): Promise<{
  paths: Paths;
  components: { responses: Record<string, Operation['responses'][string]> };
}> {
  const res = await svc.app.inject({ method: 'GET', url: '/docs/json' });
  expect(res.statusCode).toBe(200);
  return res.json();
}

const paths = async () => (await document()).paths;

describe('OpenAPI document (/docs/json)', () => {
  it('describes every route, HEAD included', async () => {
    const doc = await paths();
    expect(Object.keys(doc)).toEqual(
      expect.arrayContaining([
        '/buckets/{bucketName}',
        '/presigned-url/{bucketName}/{objectKey}',
        '/presigned-url/{objectKey}',
        ...LIST_PATHS,
        ...OBJECT_PATHS,
      ]),
    );
    for (const path of OBJECT_PATHS) {
      expect(Object.keys(doc[path]!).sort(), path).toEqual(['delete', 'get', 'head', 'put']);
      const head = doc[path]!.head!;
      expect(Object.keys(head.responses)).toEqual(expect.arrayContaining(['200', '304', '404']));
      // HEAD answers carry no body.
      for (const response of Object.values(head.responses)) expect(response.content).toBeUndefined();
    }
  });

  it('describes an upload body as binary of any content type, and a download as binary', async () => {
    const doc = await paths();
    for (const path of OBJECT_PATHS) {
      const body = doc[path]!.put!.requestBody?.content;
      expect(body, path).toEqual({ '*/*': { schema: expect.objectContaining({ type: 'string', format: 'binary' }) } });
      for (const status of ['200', '206']) {
        const content = doc[path]!.get!.responses[status]!.content!;
        expect(Object.keys(content), `${path} ${status}`).not.toContain('application/json');
        expect(Object.values(content)[0]!.schema).toMatchObject({ type: 'string', format: 'binary' });
      }
      expect(doc[path]!.get!.responses['304']!.content).toBeUndefined();
      expect(doc[path]!.delete!.responses['204']!.content).toBeUndefined();
    }
  });

  it('types every error response application/problem+json, with 502 wherever the store is called', async () => {
    const { paths: doc, components } = await document();
    const storeCalls: Array<[string, string]> = [
      ['/buckets/{bucketName}', 'post'],
      ...LIST_PATHS.map((p): [string, string] => [p, 'get']),
      ...OBJECT_PATHS.flatMap(
        (p): Array<[string, string]> => [
          [p, 'put'],
          [p, 'get'],
          [p, 'delete'],
        ],
      ),
    ];
    for (const [path, method] of storeCalls) {
      expect(Object.keys(doc[path]![method]!.responses), `${method} ${path}`).toEqual(
        expect.arrayContaining(['400', '404', '502', '503']),
      );
    }
    expect(doc['/objects/{objectKey}']!.put!.responses).toHaveProperty('413');
    expect(doc['/objects/{objectKey}']!.get!.responses).toHaveProperty('416');
    expect(doc['/objects/{objectKey}']!.head!.responses).toHaveProperty('502');
    for (const [path, operations] of Object.entries(doc)) {
      for (const [method, op] of Object.entries(operations)) {
        if (method === 'head') continue;
        for (const [status, response] of Object.entries(op.responses)) {
          if (Number(status) < 400 || path.startsWith('/health')) continue;
          // One response per status, declared once: an application/problem+json body of the Problem schema.
          const ref = response.$ref?.replace('#/components/responses/', '');
          expect(ref, `${method} ${path} ${status}`).toBeDefined();
          const declared = components.responses[ref!]!;
          expect(Object.keys(declared.content ?? {})).toEqual(['application/problem+json']);
          expect(declared.content!['application/problem+json']!.schema).toEqual({
            $ref: '#/components/schemas/Problem',
          });
        }
      }
    }
  });
});
