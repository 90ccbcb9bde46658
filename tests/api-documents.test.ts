/**
 * What the four services' OpenAPI documents (the committed `openapi.json`, which each service's own test keeps equal
 * to what it serves) promise alike, read side by side: callers are sent to the gateway, the platform's one origin.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const SERVICES = ['auth', 'storage', 'provider-registry', 'billing'] as const;

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document, read by path
type Json = Record<string, any>;
const documents = SERVICES.map(
  (service) =>
    [service, JSON.parse(readFileSync(path.join(root, 'services', service, 'openapi.json'), 'utf8')) as Json] as const,
);

describe.each(documents)('the OpenAPI document of %s', (_service, doc) => {
  it("names the gateway as its one server, the origin callers use, not the service's own port", () => {
    expect(doc.servers).toEqual([
      { url: 'http://127.0.0.1:8080', description: expect.stringMatching(/gateway/) as unknown as string },
    ]);
  });
});
